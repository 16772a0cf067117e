"""The dashboard's own reads: what the public API has no call for.

Dead letters grouped by error, the ids of one group (for "requeue / purge
all matching"), a page of one group's rows, the jobs in flight by worker,
and the throughput counts.  Reads only: every change the dashboard makes
goes through the public queue operations.  Each list is bounded by a
bound ``LIMIT``; values travel as bound parameters.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    Text,
    bindparam,
    func,
    literal,
    or_,
    select,
)

from .._db.sql._common import NOW, dead_row_columns, live_row_columns
from ..schema import dead_jobs, jobs, throughput

__all__ = [
    "GROUP_WINDOW",
    "dead_groups",
    "dead_ids_matching",
    "dead_ids_oldest",
    "dead_page_matching",
    "in_flight",
    "in_flight_summary",
    "now",
    "pending_page",
    "throughput_last_hour",
]

# Dead letters are grouped over the queue's newest GROUP_WINDOW dead rows
# (by death time, through the (queue, died_at) index): the page stays cheap
# however many dead rows a queue keeps, and says when it looked at fewer.
GROUP_WINDOW = 10_000
_MAX_ID = 2**63 - 1


def _queue() -> ColumnElement[str]:
    return bindparam("p_queue", type_=Text)


def _limit() -> ColumnElement[int]:
    return bindparam("p_limit", type_=Integer)


def _error_matches() -> ColumnElement[bool]:
    return dead_jobs.c.last_error.is_not_distinct_from(bindparam("p_error", type_=Text))


@cache
def now() -> Select[Any]:
    return select(NOW)


@cache
def dead_groups() -> Select[Any]:
    """``(last_error, count, newest died_at, newest id)`` of the newest dead rows, biggest first."""
    newest = (
        select(dead_jobs.c.id, dead_jobs.c.last_error, dead_jobs.c.died_at)
        .where(dead_jobs.c.queue == _queue())
        .order_by(dead_jobs.c.died_at.desc())
        .limit(literal(GROUP_WINDOW, type_=Integer))
        .subquery("newest")
    )
    return (
        select(
            newest.c.last_error,
            func.count().label("n"),
            func.max(newest.c.died_at).label("last_died_at"),
            func.max(newest.c.id).label("last_id"),
        )
        .group_by(newest.c.last_error)
        .order_by(func.count().desc(), newest.c.last_error)
        .limit(_limit())
    )


@cache
def dead_ids_oldest() -> Select[tuple[int]]:
    """The oldest ``:limit`` dead ids of ``:queue`` (O2's order: died_at, then id)."""
    return (
        select(dead_jobs.c.id)
        .where(dead_jobs.c.queue == _queue())
        .order_by(dead_jobs.c.died_at, dead_jobs.c.id)
        .limit(_limit())
    )


@cache
def dead_ids_matching() -> Select[tuple[int]]:
    """The oldest ``:limit`` dead ids of ``:queue`` whose last_error is ``:error`` (NULL-safe)."""
    return (
        select(dead_jobs.c.id)
        .where(dead_jobs.c.queue == _queue(), _error_matches())
        .order_by(dead_jobs.c.died_at, dead_jobs.c.id)
        .limit(_limit())
    )


def _below() -> ColumnElement[int]:
    return func.coalesce(bindparam("p_before", type_=BigInteger), literal(_MAX_ID, BigInteger))


@cache
def dead_page_matching() -> Select[Any]:
    """A page of one error group's dead rows (ids below ``:before``), newest first."""
    return (
        select(*dead_row_columns())
        .where(dead_jobs.c.queue == _queue(), _error_matches(), dead_jobs.c.id < _below())
        .order_by(dead_jobs.c.id.desc())
        .limit(_limit())
    )


@cache
def pending_page(due: bool) -> Select[Any]:
    """A page of this queue's due (or scheduled) rows, unexpired, newest first.

    O1 lists pending rows; the queue page also splits them as O5 counts them.
    """
    unexpired = or_(jobs.c.expires_at.is_(None), jobs.c.expires_at > NOW)
    when = jobs.c.run_at <= NOW if due else jobs.c.run_at > NOW
    return (
        select(*live_row_columns())
        .where(
            jobs.c.queue == _queue(),
            jobs.c.status == "pending",
            when,
            unexpired,
            jobs.c.id < _below(),
        )
        .order_by(jobs.c.id.desc())
        .limit(_limit())
    )


@cache
def in_flight_summary() -> Select[Any]:
    """Per worker and queue: jobs held, the earliest and latest claim deadline."""
    return (
        select(
            jobs.c.worker_id,
            jobs.c.queue,
            func.count().label("n"),
            func.min(jobs.c.claim_deadline).label("first_deadline"),
            func.max(jobs.c.claim_deadline).label("last_deadline"),
        )
        .where(jobs.c.status == "processing")
        .group_by(jobs.c.worker_id, jobs.c.queue)
        .order_by(jobs.c.worker_id, jobs.c.queue)
        .limit(_limit())
    )


@cache
def in_flight() -> Select[Any]:
    """The in-flight jobs with the nearest deadlines first (no payloads)."""
    return (
        select(
            jobs.c.id,
            jobs.c.queue,
            jobs.c.worker_id,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.claim_deadline,
        )
        .where(jobs.c.status == "processing")
        .order_by(jobs.c.claim_deadline, jobs.c.id)
        .limit(_limit())
    )


@cache
def throughput_last_hour(one_queue: bool) -> Select[Any]:
    """Per minute of the last hour: acked, retried, dead (of ``:queue``, or of every queue)."""
    since = func.date_trunc(literal("minute", type_=Text), NOW) - literal(timedelta(minutes=59))
    where = [throughput.c.minute >= since]
    if one_queue:
        where.append(throughput.c.queue == _queue())
    return (
        select(
            throughput.c.minute,
            func.sum(throughput.c.acked).label("acked"),
            func.sum(throughput.c.retried).label("retried"),
            func.sum(throughput.c.dead).label("dead"),
        )
        .where(*where)
        .group_by(throughput.c.minute)
        .order_by(throughput.c.minute)
    )
