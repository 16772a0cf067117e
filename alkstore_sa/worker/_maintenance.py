"""Maintenance: the sweeps a worker runs beside its queues (O7).

Every queue the worker serves is swept (Q25: expired rows to dead, dead
rows past the queue's ``dead_letter_retention`` purged; the Q12 move too)
once at start and then every ``sweep_interval`` seconds, with that queue
handle's options -- so expiry and retention need no cron job.  Several
workers sweeping one queue at once is safe: the sweep's statements skip
rows another transaction holds and are idempotent.  A sweep that fails is
logged and tried again at the next interval; it never delays claims (its
own task, never inside the producer loop).

The vacuum: every ``vacuum_interval`` seconds the worker
looks at each of its stores' jobs table and, once it holds more than
``VACUUM_MIN_DEAD`` dead row versions plus ``VACUUM_LIVE_FRACTION`` of its
live rows, VACUUMs it -- one worker at a time (an advisory lock).
Autovacuum looks only once a ``autovacuum_naptime`` (a minute by default),
and a busy queue table piles up dead versions faster than that.  A role
that may not vacuum the table (not its owner) is told once, at INFO, and
the worker leaves it to autovacuum.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from ._state import QueueState, RunState, reraise_if_cancelled

__all__ = ["VACUUM_LIVE_FRACTION", "VACUUM_MIN_DEAD", "Maintenance"]

# Vacuum once dead versions exceed this many plus this share of the live
# rows: a small queue table every few seconds under load, a big backlog
# (whose indexes a vacuum reads whole) about as rarely as autovacuum would.
VACUUM_MIN_DEAD = 2_000
VACUUM_LIVE_FRACTION = 0.2

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

    async def vacuum(self, interval: float) -> None:
        """Look at each store's jobs table every ``interval`` seconds; vacuum it when due."""
        loop = self._run.loop
        # One look per table: per engine and schema, whatever the queues in it.
        stores: dict[tuple[Hashable, str], QueueState] = {}
        for qs in self._run.queues:
            stores.setdefault((qs.port.listen_group, qs.binding.core.address.schema), qs)
        while stores:
            started = loop.time()
            for where, qs in list(stores.items()):
                if not await self._vacuum(qs):
                    del stores[where]
            await asyncio.sleep(max(started + interval - loop.time(), 0.0))
        await asyncio.Event().wait()  # nothing left to vacuum: idle (a part never ends)

    async def _vacuum(self, qs: QueueState) -> bool:
        """One look; False when this worker may not vacuum the table (stop looking)."""
        schema = qs.binding.core.address.schema
        try:
            outcome = await qs.port.vacuum(VACUUM_MIN_DEAD, VACUUM_LIVE_FRACTION)
        except Exception as exc:
            reraise_if_cancelled(exc)
            self._run.db_failed()
            log.warning("vacuum of %s.jobs failed: %s; trying again next interval", schema, exc)
            return True
        self._run.db_ok()
        if outcome == "not permitted":
            log.info(
                "worker %s may not vacuum %s.jobs (not its owner): left to autovacuum",
                self._run.settings.worker_id,
                schema,
            )
            return False
        if outcome == "vacuumed":
            log.debug("vacuumed %s.jobs", schema)
        return True

    async def _sweep(self, qs: QueueState) -> None:
        try:
            result = await qs.port.sweep()
        except Exception as exc:
            reraise_if_cancelled(exc)
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
