"""The reads behind ``alkstore stats``, ``jobs`` and ``sweep`` (O1, O5, O6), in one place.

Stand-ins for ``store.queue_names()``, ``queue.stats()`` and
``queue.jobs()``: until those exist, these read the two tables directly
with Core selects.  Each function takes the store or queue handle the
command already has and mirrors that method's signature and result, so
switching to the library's own method is a one-line change in each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from sqlalchemy import (
    Connection,
    DateTime,
    Float,
    Text,
    and_,
    extract,
    func,
    literal,
    null,
    or_,
    select,
    union,
)

from .._connect import schema_errors
from .._job import Job, JobStatus
from .._sql._common import NOW
from ..schema import DEFAULT_SCHEMA, dead_jobs, jobs
from ..store import Queue, Store

__all__ = ["STATS_FIELDS", "STATUSES", "QueueCounts", "list_jobs", "queue_names", "queue_stats"]

STATUSES: tuple[str, ...] = get_args(JobStatus)
MAX_LIMIT = 1000
# QueueStats' fields after its queue name (O5), in order: what `stats` prints.
STATS_FIELDS = (
    "due",
    "scheduled",
    "processing",
    "lapsed",
    "expired",
    "dead",
    "oldest_due_age",
    "paused",
)


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """``QueueStats``' fields (O5), read by the CLI itself until ``queue.stats()`` exists.

    ``paused`` is ``None``: whether a queue is paused is not stored yet (O4).
    """

    queue: str
    due: int = 0
    scheduled: int = 0
    processing: int = 0
    lapsed: int = 0
    expired: int = 0
    dead: int = 0
    oldest_due_age: float = 0.0
    paused: bool | None = None


def _mapped(conn: Connection, schema: str) -> Connection:
    return conn.execution_options(schema_translate_map={DEFAULT_SCHEMA: schema})


def queue_names(store: Store) -> list[str]:
    """Every queue with a live or a dead row, sorted (``store.queue_names()``, O6)."""
    names = union(select(jobs.c.queue), select(dead_jobs.c.queue))
    with store.engine.connect() as conn, schema_errors(store.schema):
        found = _mapped(conn, store.schema).execute(names).scalars().all()
    return sorted(found)


def queue_stats(store: Store, names: Sequence[str]) -> dict[str, QueueCounts]:
    """Each named queue's counts from one statement: one snapshot, one clock (``q.stats()``)."""
    if not names:
        return {}
    expired = and_(jobs.c.expires_at.is_not(None), jobs.c.expires_at <= NOW)
    live_now = or_(jobs.c.expires_at.is_(None), jobs.c.expires_at > NOW)
    pending = jobs.c.status == "pending"
    due = and_(pending, jobs.c.run_at <= NOW, live_now)
    processing = jobs.c.status == "processing"
    live = (
        select(
            jobs.c.queue,
            func.count().filter(due).label("due"),
            func.count().filter(and_(pending, jobs.c.run_at > NOW, live_now)).label("scheduled"),
            func.count().filter(processing).label("processing"),
            func.count().filter(and_(processing, jobs.c.claim_deadline <= NOW)).label("lapsed"),
            func.count().filter(expired).label("expired"),
            func.coalesce(extract("epoch", NOW - func.min(jobs.c.run_at).filter(due)), 0).label(
                "oldest_due_age"
            ),
        )
        .where(jobs.c.queue.in_(names))
        .group_by(jobs.c.queue)
        .subquery("live")
    )
    dead = (
        select(dead_jobs.c.queue, func.count().label("dead"))
        .where(dead_jobs.c.queue.in_(names))
        .group_by(dead_jobs.c.queue)
        .subquery("dead")
    )
    both = select(
        func.coalesce(live.c.queue, dead.c.queue).label("queue"),
        *(func.coalesce(live.c[f], 0).label(f) for f in STATS_FIELDS[:5]),
        func.coalesce(dead.c.dead, 0).label("dead"),
        func.coalesce(live.c.oldest_due_age, 0).cast(Float).label("oldest_due_age"),
    ).select_from(live.join(dead, live.c.queue == dead.c.queue, full=True))
    with store.engine.connect() as conn, schema_errors(store.schema):
        rows = _mapped(conn, store.schema).execute(both).mappings().all()
    found = {str(row["queue"]): QueueCounts(**row) for row in rows}
    return {name: found.get(name, QueueCounts(name)) for name in names}


def list_jobs(
    queue: Queue,
    status: str | None = None,
    *,
    limit: int = 100,
    before: int | None = None,
) -> list[Job]:
    """This queue's rows, live and dead, newest first by id (``queue.jobs()``, O1)."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be 1..{MAX_LIMIT}, got {limit}")
    branches: list[Any] = []
    if status != "dead":
        live = select(*jobs.c, null().cast(DateTime(timezone=True)).label("died_at")).where(
            jobs.c.queue == queue.name
        )
        if status is not None:
            live = live.where(jobs.c.status == status)
        if before is not None:
            live = live.where(jobs.c.id < before)
        branches.append(live.order_by(jobs.c.id.desc()).limit(limit))
    if status in (None, "dead"):
        dead = select(
            *(
                literal("dead", type_=Text).label("status")
                if col.name == "status"
                else dead_jobs.c[col.name]
                for col in jobs.c
            ),
            dead_jobs.c.died_at,
        ).where(dead_jobs.c.queue == queue.name)
        if before is not None:
            dead = dead.where(dead_jobs.c.id < before)
        branches.append(dead.order_by(dead_jobs.c.id.desc()).limit(limit))
    rows_of = branches[0] if len(branches) == 1 else branches[0].union_all(branches[1])
    every = rows_of.subquery("rows")
    newest = select(every).order_by(every.c.id.desc()).limit(limit)
    store = queue.store
    with store.engine.connect() as conn, schema_errors(store.schema):
        rows = _mapped(conn, store.schema).execute(newest).all()
    return [Job.from_live(tuple(row)[:-1], died_at=row.died_at) for row in rows]
