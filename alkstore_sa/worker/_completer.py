"""The completer: acks of successful jobs, batched across jobs and queues.

Handlers that return hand their claim here and get a future that says
whether the ack landed.  One flush runs at a time; whatever piles up during
it goes out in the next one, so under load many acks share a round trip and
when idle an ack waits for none.  The acks check ``(id, attempts)``
(the claim's identity, Q14), so a job that lapsed and was reclaimed elsewhere
is never acked by its old claimant.  A flush that fails (database away) is
retried with backoff; the claims stay heartbeated meanwhile.
"""

from __future__ import annotations

import asyncio
import logging

from ._port import ClaimKey
from ._state import QueueState, RunState, reraise_if_cancelled

__all__ = ["Completer"]

log = logging.getLogger("alkstore_sa.worker")

RETRY_FIRST = 0.1
RETRY_CAP = 2.0

Pending = dict[QueueState, list[tuple[ClaimKey, "asyncio.Future[bool]"]]]


class Completer:
    def __init__(self, run: RunState | None = None) -> None:
        # The run's database health: failed flushes count as failed calls, a
        # landed one as a success (the first after failures ends every
        # part's backoff, ``RunState.db_ok``), and a retry wait ends when
        # another part's call succeeds first.
        self._run = run
        self._pending: Pending = {}  # claims waiting for an ack, per queue
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

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
        if self._run is None:
            await asyncio.sleep(seconds)
            return
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
                if self._run is not None:
                    self._run.db_failed()
                failed[qs] = items
                return
            if self._run is not None:
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
