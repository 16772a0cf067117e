"""The completer: settles every outcome of a handler run, batching the acks.

The executor hands each run's ``Outcome`` here (``settle``); the completer
records it through the queue's port and reports what it came to
(``_outcomes``): an ack, a retry (whose due time arms the producer's timer,
V5), a dead letter, a release at shutdown, or a lost claim.  An outcome
the database refuses (the claim lapsed) or cannot record (the database is
away) is reported lost; the claim then lapses and the job runs again (at
least once).

Acks are batched across jobs and queues: one flush runs at a time, and
whatever piles up during it goes out in the next one, so under load many
acks share a round trip and when idle an ack waits for none.  The acks
check ``(id, attempts)`` (the claim's identity, Q14), so a job that lapsed
and was reclaimed elsewhere is never acked by its old claimant.  A flush
that fails (database away) is retried with backoff; the claims stay
heartbeated meanwhile.  ``Settler`` is the same without the batching (each
ack its own round trip): what ``alkstore_sa.testing`` runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

from ._outcomes import Outcome, Reporter, Reports
from ._port import ClaimKey
from ._state import QueueState, RunState, Slot, reraise_if_cancelled

__all__ = ["Completer", "Settler"]

log = logging.getLogger("alkstore_sa.worker")

R = TypeVar("R")

RETRY_FIRST = 0.1
RETRY_CAP = 2.0

Pending = dict[QueueState, list[tuple[ClaimKey, "asyncio.Future[bool]"]]]


class Settler:
    """Settles each outcome as it comes, in the database and in its report."""

    def __init__(self, run: RunState, reports: Reports) -> None:
        self._run = run
        self.reports = reports

    async def settle(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        """Record ``outcome`` of ``slot``'s run and report what it came to."""
        report = self.reports
        kind = outcome.kind
        if kind == "acked":
            if outcome.by_session:
                report.acked(qs, slot, by_session=True)
            else:
                await self._settle_ack(qs, slot, outcome)
        elif kind == "retry":
            trace = None if outcome.trace is None else outcome.trace.text
            retried = qs.port.retry(slot.key, outcome.error, outcome.delay, trace)
            result = await self._record(qs, slot, "retry", retried, outcome)
            if result == "retried":
                qs.due(self._run.loop.time() + outcome.delay)  # V5: claim it when due
                report.retried(qs, slot, outcome)
            elif result == "dead":
                report.dead(qs, slot, outcome)
        elif kind == "dead":
            trace = None if outcome.trace is None else outcome.trace.text
            failed = qs.port.fail(slot.key, outcome.error, trace)
            if await self._record(qs, slot, "fail", failed, outcome):
                report.dead(qs, slot, outcome)
        elif kind == "snoozed":
            snoozed = qs.port.snooze(slot.key, outcome.delay)
            if await self._record(qs, slot, "snooze", snoozed, outcome):
                qs.due(self._run.loop.time() + outcome.delay)  # V5: claim it when due
                report.snoozed(qs, slot, outcome)
        elif kind == "cancelled":
            report.cancelled(qs, slot)
        elif kind == "released":
            await self._release(qs, slot)
        else:
            report.lost(qs, slot, outcome.why, outcome)

    async def _settle_ack(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        """One ack, its own round trip."""
        if await self._record(qs, slot, "ack", _ack_one(qs, slot, outcome), outcome):
            self.reports.acked(qs, slot)

    async def _release(self, qs: QueueState, slot: Slot) -> None:
        try:
            released = await qs.port.release(slot.key)
        except Exception as exc:
            reraise_if_cancelled(exc)
            log.warning("job %d: release at shutdown failed: %s", slot.job.id, exc)
            return
        self.reports.released(qs, slot, released)

    async def _record(
        self, qs: QueueState, slot: Slot, what: str, call: Awaitable[R], outcome: Outcome
    ) -> R | None:
        """The call's result; None (reported lost) when it could not be recorded."""
        try:
            result = await call
        except Exception as exc:
            reraise_if_cancelled(exc)
            # The claim lapses and the job is handed out again (at least once).
            self._run.db_failed()
            self.reports.lost(qs, slot, f"recording the {what} failed: {exc}", outcome)
            return None
        self._run.db_ok()
        if not result:
            if slot.cancelled:  # C1: the cancel committed first
                self.reports.cancelled(qs, slot)
            else:
                self.reports.lost(qs, slot, f"{what} refused, the claim was already gone", outcome)
            return None
        return result


async def _ack_one(qs: QueueState, slot: Slot, outcome: Outcome) -> bool:
    if slot.job.keep_completed is not None:  # R1: moved with its result
        return await qs.port.ack_kept(slot.key, outcome.result)
    return slot.key[0] in await qs.port.ack([slot.key])


class Completer(Settler):
    """The worker's settler: acks batched across jobs and queues, flushed by ``run``."""

    def __init__(self, run: RunState) -> None:
        super().__init__(run, Reporter(run))
        self._pending: Pending = {}  # claims waiting for an ack, per queue
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    async def _settle_ack(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        if slot.job.keep_completed is not None:
            # R1: a kept job's ack moves it with its result: a round trip of its own.
            await super()._settle_ack(qs, slot, outcome)
            return
        if await self.ack(qs, slot.key):
            self.reports.acked(qs, slot)
        elif slot.cancelled:  # C1: the cancel committed first
            self.reports.cancelled(qs, slot)
        else:
            self.reports.lost(qs, slot, "before the ack", outcome)

    def ack(self, qs: QueueState, claim: ClaimKey) -> asyncio.Future[bool]:
        """Queue an ack; the future resolves to whether it was acked."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(qs, []).append((claim, fut))
        self._idle.clear()
        self._wake.set()
        return fut

    async def run(self) -> None:
        """Flush until cancelled."""
        delay = RETRY_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            failed = await self._flush(batch)
            if failed:
                # Put the failed claims back in front and try again later.
                for qs, items in failed.items():
                    self._pending[qs] = items + self._pending.get(qs, [])
                self._wake.set()
                await self._backoff(delay)
                delay = min(delay * 2, RETRY_CAP)
                continue
            delay = RETRY_FIRST
            if not self._pending:
                self._idle.set()

    async def _backoff(self, seconds: float) -> None:
        """Wait ``seconds`` -- or, if another call lands meanwhile, until the floor
        (``RETRY_FIRST``) after the failure: at once, but never a spin."""
        loop = asyncio.get_running_loop()
        floor = loop.time() + RETRY_FIRST
        if await self._run.backoff(seconds):
            await asyncio.sleep(max(0.0, floor - loop.time()))

    async def _flush(self, batch: Pending) -> Pending:
        failed: Pending = {}

        async def one(qs: QueueState, items: list[tuple[ClaimKey, asyncio.Future[bool]]]) -> None:
            try:
                acked = set(await qs.port.ack([claim for claim, _ in items]))
            except Exception as exc:
                reraise_if_cancelled(exc)
                log.warning(
                    "acking %d job(s) of %s failed: %s; will retry", len(items), qs.name, exc
                )
                self._run.db_failed()  # counted, and its success below ends others' backoffs
                failed[qs] = items
                return
            self._run.db_ok()
            for (job_id, _), fut in items:
                if not fut.done():
                    fut.set_result(job_id in acked)

        await asyncio.gather(*(one(qs, items) for qs, items in batch.items()))
        return failed

    async def drain(self, timeout: float) -> bool:
        """Wait until every queued ack has been flushed; ``False`` on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def abandon(self) -> int:
        """Resolve what is still queued as not acked (shutdown gave up); returns how many."""
        count = 0
        for items in self._pending.values():
            for _, fut in items:
                if not fut.done():
                    fut.set_result(False)
                    count += 1
        self._pending.clear()
        return count
