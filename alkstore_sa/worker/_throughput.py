"""Throughput counts (W2): a worker's outcome tallies, added to the database about once a second.

The reporter counts each acked, retried and dead-lettered job in memory
(``RunState.tallies``, a dict increment on the job's path); this task swaps
the tallies out every ``FLUSH_INTERVAL`` and adds them to the queue's row for
the current minute, one upsert per queue that had outcomes -- so the cost
on a busy worker is one small statement per queue per second, not one per
job.  The counts are statistics, not jobs: a flush that fails (database
away, or the ``throughput`` table not migrated yet) drops that second's
counts and says so once, at WARNING, until a flush succeeds again.
"""

from __future__ import annotations

import asyncio
import logging

from ._state import RunState, reraise_if_cancelled

__all__ = ["FLUSH_INTERVAL", "Throughput"]

log = logging.getLogger("alkstore_sa.worker")

FLUSH_INTERVAL = 1.0


class Throughput:
    def __init__(self, run: RunState) -> None:
        self._run = run
        self._failing = False

    async def run(self) -> None:
        """Flush every ``FLUSH_INTERVAL`` until cancelled."""
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            await self.flush()

    async def flush(self) -> None:
        tallies, self._run.tallies = self._run.tallies, {}
        for qs, (acked, retried, dead) in tallies.items():
            try:
                await qs.port.record_outcomes(acked, retried, dead)
            except Exception as exc:
                reraise_if_cancelled(exc)
                if not self._failing:
                    log.warning("recording the throughput of %s failed: %s", qs.name, exc)
                self._failing = True
                continue
            self._failing = False
