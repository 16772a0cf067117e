"""Heartbeats: every held claim is extended while its handler runs (Q15, Q27).

Each claimed job is beaten at a third of its own visibility timeout, so a
slow handler is never reclaimed under it, and a heartbeat that is late by
up to two thirds of the timeout is still in time.  One task serves every
queue of the run: it sleeps until the earliest beat is due, then beats, per
queue in one statement, every claim at least halfway to its own beat time
(fewer round trips).  A claim the database no longer extends was lost
(lapsed, cancelled, reclaimed): it is marked so, and its job is not acked.
When its job has no row left at all it was cancelled (C1): ``on_gone``
stops it, the fallback for a cancel whose notification never came (LISTEN
down).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ._state import QueueState, RunState, Slot, reraise_if_cancelled

__all__ = ["BEAT_FRACTION", "BEAT_RETRY", "Heartbeats"]

log = logging.getLogger("alkstore_sa.worker")

BEAT_FRACTION = 1 / 3  # heartbeat at this fraction of the job's visibility timeout
BEAT_RETRY = 0.25  # after a failed heartbeat, try again this soon (seconds, at most)
MIN_BEAT = 0.01  # never beat more often than this, whatever the visibility timeout
IDLE_WAIT = 3600.0  # nothing held: sleep until a claim arrives


class Heartbeats:
    def __init__(self, run: RunState) -> None:
        self._run = run
        self._wakes_at = 0.0  # when the task wakes next (loop time); 0 while beating
        self._sleep: asyncio.Timeout | None = None  # the task's sleep, while it sleeps
        # C1: told the ids of lost claims whose jobs have no row left (cancelled).
        self.on_gone: Callable[[QueueState, set[int]], None] | None = None

    def track(self, slot: Slot) -> None:
        """Schedule ``slot``'s first beat (call once it is in its queue's ``held``)."""
        slot.beat_every = max(slot.job.visibility_timeout * BEAT_FRACTION, MIN_BEAT)
        slot.next_beat = self._run.loop.time() + slot.beat_every
        if slot.next_beat < self._wakes_at:
            # The sleep's end moves earlier; the task is not woken: it has
            # nothing to do before then, and a wake here would take a loop
            # pass beside the handler's start, on the wake path (L1).
            self._wakes_at = slot.next_beat
            sleep = self._sleep
            if sleep is not None and not sleep.expired():
                sleep.reschedule(slot.next_beat)

    async def run(self) -> None:
        """Beat until cancelled."""
        loop = self._run.loop
        while True:
            now = loop.time()
            beating = [s for s in self._run.held() if not s.lost]
            wait = min(s.next_beat for s in beating) - now if beating else IDLE_WAIT
            if wait > 0:
                self._wakes_at = now + wait
                try:
                    async with asyncio.timeout_at(self._wakes_at) as self._sleep:
                        await loop.create_future()  # until the (movable) deadline
                except TimeoutError:
                    pass
                finally:
                    self._sleep = None
                continue
            self._wakes_at = 0.0  # beating: whatever starts meanwhile re-checks
            await asyncio.gather(*(self._beat(qs) for qs in self._run.queues))

    async def _beat(self, qs: QueueState) -> None:
        now = self._run.loop.time()
        due = [s for s in qs.held.values() if not s.lost and s.next_beat - s.beat_every / 2 <= now]
        if not due:
            return
        try:
            extended = set(await qs.port.heartbeat([s.key for s in due]))
        except Exception as exc:
            reraise_if_cancelled(exc)
            failures = self._run.db_failed()
            log.warning(
                "heartbeat on %s failed (%d database errors in a row): %s; retrying",
                qs.name,
                failures,
                exc,
            )
            for s in due:
                s.next_beat = now + min(BEAT_RETRY, s.beat_every / 2)
            return
        self._run.db_ok()
        lost: list[int] = []
        for s in due:
            if s.job.id in extended or s.finishing:
                # A finishing job's row may be gone already: its outcome says
                # what happened; just do not beat it again at once.
                s.next_beat = now + s.beat_every
            elif qs.held.get(s.key) is s:
                # Kept in ``held`` (not beaten, never acked): shutdown must still
                # cancel or abandon its handler within the grace.
                s.lost = True
                lost.append(s.job.id)
                # Not the outcome yet: that is reported (lost) when the handler returns.
                log.info(
                    "job %d on %s: heartbeat found its claim gone (lapsed, cancelled or "
                    "reclaimed); it will not be acked",
                    s.job.id,
                    qs.name,
                    extra={"alkstore_queue": qs.name, "alkstore_job_id": s.job.id},
                )
        if lost and self.on_gone is not None:
            await self._cancelled(qs, lost)

    async def _cancelled(self, qs: QueueState, lost: list[int]) -> None:
        """C1's fallback: those of ``lost`` with no row left were cancelled."""
        assert self.on_gone is not None
        try:
            gone = await qs.port.gone(lost)
        except Exception as exc:
            reraise_if_cancelled(exc)
            log.debug("asking whether %d lost claim(s) were cancelled failed: %s", len(lost), exc)
            return
        if gone:
            self.on_gone(qs, set(gone))
