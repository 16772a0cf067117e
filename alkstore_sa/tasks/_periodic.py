"""Periodic jobs (P1): a cron schedule that enqueues onto a queue or defers a task.

``Periodic(name, cron, target, args=None, *, tz="UTC")`` is declared in
code and handed to workers (``Worker(..., periodic=[...])``).  Every worker
runs the schedules it is given; the database makes sure each (name,
scheduled time) becomes exactly one job however many run them: a row per
schedule holds its last fired slot, and firing is a compare-and-set UPDATE
of that row in the same transaction as the enqueue (see ``fire_call``).

Cron expressions are parsed and walked by ``cronsim`` (the ``periodic``
extra): five fields (minute hour day-of-month month day-of-week), the
``@hourly``-style aliases, in the schedule's time zone with daylight-saving
changes handled as Debian's cron does (a time skipped by a spring-forward
runs right after the change; a time that occurs twice runs once).  A
sixth, leading seconds field is accepted too (cronsim's extension, and
what the tests use to see several slots in seconds).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import Connection

from .._db.address import StoreAddress
from .._db.execute import fetch
from .._db.sql import _common as common_sql
from .._db.sql import periodic as periodic_sql
from .._values.opts import EnqueueOpts
from ..aio import AsyncQueue
from ..aio import queue_parts as async_queue_parts
from ..store import Queue
from ..store import queue_parts as sync_queue_parts
from ._task import TaskBase

__all__ = ["ALIASES", "Fired", "Periodic", "checked_schedules"]

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_NAME_CHARS = 200
_TICK = timedelta(microseconds=1)


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:  # pragma: no cover - the extra is installed in the dev env
        raise ImportError(
            "periodic jobs need the cron parser: pip install 'alkstore-sa[periodic]' (cronsim)"
        ) from None
    return cronsim


def _name(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"periodic name must be a str, got {type(value).__name__}")
    if not value or value.isspace():
        raise ValueError("periodic name must not be empty")
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"periodic name is longer than {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in value):
        raise ValueError(f"periodic name {value!r} contains a control/format character")
    return value


def _zone(tz: object) -> tzinfo:
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a time zone name or a tzinfo, got {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}") from None


def _expression(cron: object) -> str:
    if not isinstance(cron, str):
        raise TypeError(f"cron must be a str, got {type(cron).__name__}")
    text = " ".join(cron.split())
    if text.startswith("@"):
        expanded = ALIASES.get(text.lower())
        if expanded is None:
            raise ValueError(f"unknown cron alias {text!r} (known: {', '.join(ALIASES)})")
        return expanded
    if len(text.split()) not in (5, 6):
        raise ValueError(
            f"cron {cron!r} must have five fields (minute hour day month weekday), "
            "or an @alias such as @hourly"
        )
    return text


@dataclass(frozen=True, slots=True)
class Fired:
    """What one firing attempt found: the database's time, the slot due then, the job made."""

    now: datetime
    slot: datetime | None
    job_id: int | None


class Periodic:
    """A named cron schedule that enqueues ``args`` onto ``target`` at each slot.

    ``target`` is a ``Queue``/``AsyncQueue`` (``args``: the payload bytes,
    default ``b""``) or a task (``args``: its kwargs dict, default ``{}``,
    checked now like ``defer`` checks them).  Each job's ``run_at`` is its
    scheduled time.
    """

    def __init__(
        self,
        name: str,
        cron: str,
        target: Queue | AsyncQueue | TaskBase[Any],
        args: bytes | Mapping[str, Any] | None = None,
        *,
        tz: str | tzinfo = "UTC",
    ) -> None:
        self.name = _name(name)
        self.cron = cron
        self.expression = _expression(cron)
        self.tz = _zone(tz)
        self._cronsim = _cronsim()
        try:  # parse now: a bad expression is refused where it is declared
            self._cronsim.CronSim(self.expression, datetime.now(self.tz))
        except self._cronsim.CronSimError as exc:
            raise ValueError(f"cron {cron!r}: {exc}") from None
        self.target = target
        if isinstance(target, TaskBase):
            if args is not None and not isinstance(args, Mapping):
                raise TypeError(
                    f"periodic {name!r}: a task's args are its kwargs dict, "
                    f"got {type(args).__name__}"
                )
            self.args: bytes | dict[str, Any] = dict(args or {})
            self.queue: Queue | AsyncQueue = target.queue
            self.payload = target.payload(self.args)  # TypeError now, not at 3 a.m.
        elif isinstance(target, Queue | AsyncQueue):
            if args is None:
                args = b""
            if not isinstance(args, bytes | bytearray | memoryview):
                raise TypeError(
                    f"periodic {name!r}: a queue's args are the payload bytes, "
                    f"got {type(args).__name__}"
                )
            self.args = self.payload = bytes(args)
            self.queue = target
        else:
            raise TypeError(
                f"periodic target must be a Queue, AsyncQueue or task, got {type(target).__name__}"
            )

    @property
    def is_async(self) -> bool:
        """True when the target lives on an ``AsyncStore`` (an ``AsyncWorker`` runs it)."""
        return isinstance(self.queue, AsyncQueue)

    @property
    def target_name(self) -> str:
        if isinstance(self.target, TaskBase):
            return f"task {self.target.name} (queue {self.queue.name})"
        return f"queue {self.queue.name}"

    def _walk(self, dt: datetime, reverse: bool) -> datetime | None:
        local = dt.astimezone(self.tz)
        try:
            found = next(self._cronsim.CronSim(self.expression, local, reverse=reverse))
        except StopIteration:  # nothing within cronsim's fifty-year horizon
            return None
        # Compare instants in UTC: aware datetimes sharing a tzinfo compare
        # their wall times, which a repeated hour makes ambiguous.
        return found.astimezone(UTC)  # type: ignore[no-any-return]

    def next_after(self, dt: datetime) -> datetime:
        """The first scheduled time strictly after ``dt`` (aware), in the schedule's zone."""
        _aware(dt)
        found = self._walk(dt, reverse=False)
        if found is None:
            raise ValueError(f"periodic {self.name!r}: cron {self.cron!r} never matches again")
        return found.astimezone(self.tz)

    def last_at_or_before(self, dt: datetime) -> datetime | None:
        """The latest scheduled time at or before ``dt`` (aware), or None; in UTC."""
        _aware(dt)
        # cronsim walks back from a time with microseconds by first dropping
        # them, so dt + 1 us finds a slot exactly at dt too.
        found = self._walk(dt + _TICK, reverse=True)
        return found if found is not None and found <= dt else None

    def fire_call(self, now: datetime | None = None) -> Callable[[Connection], Fired]:
        """The transaction that fires this schedule if a slot is due (``Fired``).

        ``now`` is the database's clock unless given (the tests' injectable
        clock).  First sight of the schedule records the latest slot as fired
        without enqueuing it: a new schedule starts at its next slot.  After
        that, the latest slot at or before ``now`` fires when it is newer than
        the row's: only the most recent of several missed slots is enqueued.
        The UPDATE's row lock serialises workers firing at once; the loser
        re-reads the row after the winner commits and finds nothing to do.
        """
        address = StoreAddress(self.queue.store.schema)
        queue = self.queue
        _, core = sync_queue_parts(queue) if isinstance(queue, Queue) else async_queue_parts(queue)

        def fire(conn: Connection) -> Fired:
            at = now or fetch(conn, address, common_sql.clock(), {})[0][0]
            slot = self.last_at_or_before(at)
            if slot is None:
                return Fired(at, None, None)
            params = {"p_name": self.name, "p_slot": slot}
            if fetch(conn, address, periodic_sql.first_sight(), params):
                return Fired(at, None, None)
            if not fetch(conn, address, periodic_sql.advance(), params):
                return Fired(at, None, None)
            job_id = core.enqueue(self.payload, EnqueueOpts(run_at=slot))(conn)
            return Fired(at, slot, job_id)

        return fire

    def __repr__(self) -> str:
        return f"<Periodic {self.name!r} {self.cron!r} tz={self.tz} -> {self.target_name}>"


def _aware(dt: object) -> None:
    if not isinstance(dt, datetime):
        raise TypeError(f"expected a datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("expected an aware datetime (with tzinfo)")


def checked_schedules(periodic: object, what: str, is_async: bool) -> list[Periodic]:
    """P1: the schedules a worker fires, checked: ``Periodic``s of its kind, names unique."""
    if periodic is None:
        return []
    if isinstance(periodic, Periodic) or not isinstance(periodic, Iterable):
        raise TypeError(f"{what}: periodic takes a list of Periodic")
    schedules = list(periodic)
    names: set[str] = set()
    for schedule in schedules:
        if not isinstance(schedule, Periodic):
            raise TypeError(f"{what}: periodic takes Periodic items, got {type(schedule).__name__}")
        if schedule.is_async != is_async:
            store = "an AsyncStore" if schedule.is_async else "a Store"
            raise TypeError(
                f"{what}: periodic {schedule.name!r} enqueues through {store}; "
                f"give it to {'AsyncWorker' if schedule.is_async else 'Worker'}"
            )
        if schedule.name in names:
            raise ValueError(f"{what}: periodic {schedule.name!r} appears twice")
        names.add(schedule.name)
    return schedules
