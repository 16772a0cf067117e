"""How far behind queues are (O5) and which queues exist (O6): one statement each.

Counts are split by status so each part walks the index its status has:
pending rows through ``jobs_claim_ix``, processing rows through
``jobs_lapse_ix`` (both partial indexes led by ``queue``), dead rows through
``dead_jobs_queue_died_at_ix``; queue names are found by skipping through
those indexes one queue at a time.  Their cost follows the queue's own
rows, not the table's.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Integer,
    Join,
    Select,
    Table,
    Text,
    exists,
    func,
    literal,
    select,
    true,
    union,
)

from ...schema import completed_jobs, dead_jobs, jobs, paused_queues, throughput
from ._common import NOW, PENDING, PROCESSING, queue_param, unexpired

__all__ = ["STATS_COLUMNS", "last_hour", "queue_names", "stats", "stats_all", "stats_listed"]


# What ``stats`` returns, in order (``_ops`` reads the row by position), as
# the QueueStats field each column becomes.
STATS_COLUMNS = (
    "due",
    "scheduled",
    "processing",  # the held column
    "lapsed",
    "expired",  # the past_expiry column
    "dead",
    "oldest_due_run_at",  # the oldest column
    "now",
    "paused",
    "completed",  # R1: kept completed jobs
    # F1: the queue's limits (NULL: none), flow.LIMIT_COLUMNS' order.
    "concurrency",
    "group_concurrency",
    "rate_count",
    "rate_per",
    "group_rate_count",
    "group_rate_per",
)


def _stats_parts(queue: ColumnElement[str]) -> tuple[Join, list[ColumnElement[Any]]]:
    """The FROM clause and the ``STATS_COLUMNS`` of one queue's stats.

    ``queue`` is a bound parameter (one queue) or a column of an outer
    FROM (every queue: the parts are LATERAL).  Pending and processing rows
    are aggregated apart so each part walks its own partial index; the dead
    rows are counted from the dead table's ``(queue, died_at)`` index.
    (The aliases avoid the words of status values: those travel bound.)
    """
    live = unexpired()
    past_expiry = jobs.c.expires_at <= NOW
    due = (jobs.c.run_at <= NOW) & live
    waiting = (
        select(
            func.count().filter(due).label("due"),
            func.count().filter((jobs.c.run_at > NOW) & live).label("scheduled"),
            func.count().filter(past_expiry).label("past_expiry"),
            func.min(jobs.c.run_at).filter(due).label("oldest"),
        )
        .where(jobs.c.queue == queue, jobs.c.status == PENDING)
        .lateral("waiting")
    )
    held = (
        select(
            func.count().label("held"),
            func.count().filter(jobs.c.claim_deadline <= NOW).label("lapsed"),
            func.count().filter(past_expiry).label("past_expiry"),
        )
        .where(jobs.c.queue == queue, jobs.c.status == PROCESSING)
        .lateral("held")
    )
    dead = select(func.count().label("dead")).where(dead_jobs.c.queue == queue).lateral("dead")
    completed = (
        select(func.count().label("completed"))
        .where(completed_jobs.c.queue == queue)
        .lateral("completed")
    )
    paused = exists().where(paused_queues.c.queue == queue, paused_queues.c.paused_at.is_not(None))
    columns: list[ColumnElement[Any]] = [
        waiting.c.due,
        waiting.c.scheduled,
        held.c.held,
        held.c.lapsed,
        (waiting.c.past_expiry + held.c.past_expiry).label("past_expiry"),
        dead.c.dead,
        waiting.c.oldest,
        NOW.label("now"),
        paused.label("paused"),
        completed.c.completed,
    ]
    limits = (
        select(*(paused_queues.c[name] for name in STATS_COLUMNS[-6:]))
        .where(paused_queues.c.queue == queue)
        .lateral("limits")
    )
    columns += [limits.c[name] for name in STATS_COLUMNS[-6:]]
    parts = waiting.join(held, true()).join(dead, true()).join(completed, true())
    return parts.outerjoin(limits, true()), columns


@cache
def stats() -> Select[Any]:
    """O5: ``STATS_COLUMNS`` of ``:queue``, one row, one snapshot."""
    parts, columns = _stats_parts(queue_param())
    return select(*columns).select_from(parts)


def _distinct_queues(table: Table, *where: ColumnElement[bool], name: str) -> CTE:
    """The distinct ``queue`` values of ``table`` by a skip scan of an index led by ``queue``.

    A recursive CTE that jumps from one queue name to the next (``queue >
    previous ORDER BY queue LIMIT 1``): one index descent per queue instead
    of a read of every row.  Its last row is NULL.
    """

    def first_after(previous: ColumnElement[str] | None) -> ColumnElement[str]:
        later = () if previous is None else (table.c.queue > previous,)
        return (
            select(table.c.queue)
            .where(*where, *later)
            .order_by(table.c.queue)
            .limit(literal(1, type_=Integer))
            .scalar_subquery()
        )

    seed = select(first_after(None).label("queue")).cte(name, recursive=True)
    step = select(first_after(seed.c.queue).label("queue")).where(seed.c.queue.is_not(None))
    return seed.union_all(step)


def _all_queue_names(recent: bool = False) -> Select[tuple[str]]:
    """O6: every queue with a live row, a dead row or a pause (unordered, distinct).

    ``recent``: also every queue with throughput counted in the last hour
    (V2: the dashboard lists a queue its workers just emptied).
    """
    sources = [
        _distinct_queues(jobs, jobs.c.status == PENDING, name="waiting_queues"),
        _distinct_queues(jobs, jobs.c.status == PROCESSING, name="held_queues"),
        _distinct_queues(dead_jobs, name="dead_queues"),
    ]
    found = [select(s.c.queue).where(s.c.queue.is_not(None)) for s in sources]
    settings = select(paused_queues.c.queue)
    if recent:
        found.append(select(throughput.c.queue).where(throughput.c.minute >= last_hour()))
    else:  # O6 names paused queues; the dashboard (recent, V2) also limited ones
        settings = settings.where(paused_queues.c.paused_at.is_not(None))
    return union(*found, settings)  # type: ignore[return-value]


def last_hour() -> ColumnElement[Any]:
    """The first of the sixty minutes the dashboard's throughput shows (this one included)."""
    return func.date_trunc(literal("minute", type_=Text), NOW) - literal(timedelta(minutes=59))


@cache
def queue_names() -> Select[tuple[str]]:
    """O6: the queue names (sorted by the caller, in Python's order)."""
    names = _all_queue_names().subquery("names")
    return select(names.c.queue)


@cache
def stats_all() -> Select[Any]:
    """O6: ``queue`` then ``STATS_COLUMNS`` for every queue, one statement, one snapshot."""
    return _stats_of(_all_queue_names())


@cache
def stats_listed() -> Select[Any]:
    """``stats_all`` over O6's queues and those with throughput in the last hour (V2)."""
    return _stats_of(_all_queue_names(recent=True))


def _stats_of(queues: Select[tuple[str]]) -> Select[Any]:
    names = queues.subquery("names")
    parts, columns = _stats_parts(names.c.queue)
    return select(names.c.queue, *columns).select_from(names.join(parts, true()))
