"""Maintenance: the sweeps a worker runs beside its queues (O7).

Every queue the worker serves is swept (Q25: expired rows to dead, dead
rows past the queue's ``dead_letter_retention`` purged; the Q12 move too)
once at start and then every ``sweep_interval`` seconds, with that queue
handle's options -- so expiry and retention need no cron job.  Several
workers sweeping one queue at once is safe: the sweep's statements skip
rows another transaction holds and are idempotent.  A sweep that fails is
logged and tried again at the next interval; it never delays claims (its
own task, never inside the producer loop).
"""

from __future__ import annotations

import asyncio
import logging

from ._state import QueueState, RunState

__all__ = ["Maintenance"]

log = logging.getLogger("alkstore_sa.worker")


class Maintenance:
    def __init__(self, run: RunState) -> None:
        self._run = run

    async def run(self, interval: float) -> None:
        """Sweep every ``interval`` seconds until cancelled."""
        loop = self._run.loop
        while True:
            started = loop.time()
            for qs in self._run.queues:
                await self._sweep(qs)
            await asyncio.sleep(max(started + interval - loop.time(), 0.0))

    async def _sweep(self, qs: QueueState) -> None:
        try:
            result = await qs.port.sweep()
        except Exception as exc:
            self._run.db_failed()
            log.warning("sweep of %s failed: %s; trying again next interval", qs.name, exc)
            return
        self._run.db_ok()
        if result.expired or result.purged:
            log.info(
                "swept %s: %d expired job(s) dead-lettered, %d old dead job(s) purged",
                qs.name,
                result.expired,
                result.purged,
            )
