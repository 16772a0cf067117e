"""The periodic scheduler: a worker's task that fires its ``Periodic`` schedules (P1).

It sleeps until the earliest next slot of its schedules, then asks the
database to fire each schedule whose slot came (``Periodic.fire_call``):
one short transaction per due schedule, through the port of the schedule's
queue, that advances the schedule's row and enqueues its job together.
Time is the database's: each firing reads
the statement clock, and the local clock only decides when to wake (its
offset from the database's is learned at every firing, so a host whose
clock is off wakes at the database's slot, not its own).  Any number of
workers may run the same schedules: the row's compare-and-set makes one
job per slot.  A firing that fails (database away) is logged and tried
again after ``poll_interval``; it never touches the claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ..tasks._periodic import Periodic
from ._port import FiringPort
from ._state import RunState, reraise_if_cancelled

__all__ = ["Scheduler"]

log = logging.getLogger("alkstore_sa.worker")

# Wake at least this often to re-learn the clock offset, and never spin.
MAX_WAIT = 30.0
MIN_WAIT = 0.02
_NEVER = datetime.min.replace(tzinfo=UTC)


class Scheduler:
    def __init__(self, run: RunState, schedules: Sequence[tuple[Periodic, FiringPort]]) -> None:
        self._run = run
        self._ports = {schedule.name: port for schedule, port in schedules}
        self._schedules = [schedule for schedule, _ in schedules]
        self._tried: dict[str, datetime] = {}  # the slot each schedule last fired or found fired
        self._offset = timedelta(0)  # database clock - this host's clock

    def _now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    async def run(self) -> None:
        """Fire due schedules until the worker stops."""
        stopping = self._run.stopping
        while not stopping.is_set():
            failed = False
            for schedule in self._schedules:
                if stopping.is_set():
                    return
                if self._due(schedule) and not await self._fire(schedule):
                    failed = True
            wait = self._wait()
            if failed:
                wait = min(wait, self._run.settings.poll_interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=wait)

    def _due(self, schedule: Periodic) -> bool:
        tried = self._tried.get(schedule.name)
        if tried is None:
            return True  # first look since start: the database says what was fired
        slot = schedule.last_at_or_before(self._now())
        return slot is not None and slot > tried

    def _wait(self) -> float:
        now = self._now()
        wait = MAX_WAIT
        for schedule in self._schedules:
            try:
                upcoming = schedule.next_after(now)
            except ValueError:  # never matches again
                continue
            wait = min(wait, (upcoming - now).total_seconds())
        return max(wait, MIN_WAIT)

    async def _fire(self, schedule: Periodic) -> bool:
        try:
            fired = await self._ports[schedule.name].fire(schedule)
        except Exception as exc:
            reraise_if_cancelled(exc)
            self._run.db_failed()
            log.warning(
                "periodic %s: firing failed: %s; trying again in %gs",
                schedule.name,
                exc,
                self._run.settings.poll_interval,
            )
            return False
        self._run.db_ok()
        self._offset = fired.now - datetime.now(UTC)
        self._tried[schedule.name] = schedule.last_at_or_before(fired.now) or _NEVER
        if fired.job_id is not None:
            log.info(
                "periodic %s fired its %s slot: job %d on %s",
                schedule.name,
                fired.slot.isoformat() if fired.slot else "?",
                fired.job_id,
                schedule.queue.name,
            )
        return True
