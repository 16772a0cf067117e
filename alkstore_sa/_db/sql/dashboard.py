"""The dashboard's own reads: what the public API has no call for.

Dead letters grouped by error (V2: by exception type and folded message),
the ids and a page of one group (for "requeue / purge all matching"), a page
of due or scheduled rows, the jobs in flight by worker, the throughput
counts.  Reads only: every change the dashboard makes goes through the
public queue operations.  Each list is bounded by a bound ``LIMIT``; values
(the folding patterns too) travel as bound parameters.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    bindparam,
    func,
    literal,
    select,
    true,
)

from ...schema import dead_jobs, jobs, throughput
from ._common import (
    NOW,
    PENDING,
    PROCESSING,
    below_param,
    dead_row_columns,
    limit_param,
    live_row_columns,
    queue_param,
    unexpired,
)
from .stats import last_hour

__all__ = [
    "GROUP_TEXT",
    "set_statement_timeout",
    "GROUP_WINDOW",
    "dead_groups",
    "dead_ids_of_group",
    "dead_ids_of_typed_group",
    "dead_ids_oldest",
    "dead_page_of_group",
    "dead_page_of_typed_group",
    "due_page",
    "in_flight",
    "in_flight_summary",
    "scheduled_page",
    "throughput_all",
    "throughput_of_queue",
]

# Dead letters are grouped over the queue's newest GROUP_WINDOW dead rows
# (by death time, through the (queue, died_at) index): the page stays cheap
# however many dead rows a queue keeps, and says when it looked at fewer.
GROUP_WINDOW = 10_000
# A group is keyed by the first GROUP_TEXT characters of the error, folded:
# the key (and so a group's link) stays short however long the error is.
GROUP_TEXT = 300
_FOLDED_TEXT = 1000
# How much of the last traceback is searched for the exception's type.
_TRACEBACK_TAIL = 1000

# V2: what varies between errors of one cause, folded to a placeholder, in
# this order: UUIDs, 0x addresses, hex ids of 8+ characters with a digit and
# a letter (hashes, object ids), then every run of digits.
_FOLDS = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "ID"),
    (r"\m0[xX][0-9a-fA-F]+\M", "ID"),
    (r"\m(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\M", "ID"),
    (r"[0-9]+", "N"),
)
# The exception line a Worker's traceback ends with: ``module.Type: message``
# (or ``Type`` alone).  Only a one-line message leaves it last; otherwise the
# type is unknown (NULL) and the group is the message's alone.
_EXCEPTION_LINE = r"\n([A-Za-z_][A-Za-z0-9_.]*)(: [^\n]*)?\n?$"


@cache
def set_statement_timeout() -> Select[Any]:
    """W3: ``statement_timeout`` = ``:timeout`` until the transaction ends (``SET LOCAL``)."""
    name = _text("statement_timeout")
    return select(func.set_config(name, bindparam("p_timeout", type_=Text), true()))


def _text(value: str) -> ColumnElement[str]:
    return literal(value, type_=Text)


def folded(error: ColumnElement[Any]) -> ColumnElement[str | None]:
    """V2: ``error`` with digits and ids folded, cut to ``GROUP_TEXT`` characters.

    Folded before it is cut (so ``order 7`` and ``order 1234`` leave the same
    key whatever follows), but only its first ``_FOLDED_TEXT`` characters:
    a megabyte of error text is never run through the patterns.
    """
    text: ColumnElement[Any] = func.left(error, literal(_FOLDED_TEXT, type_=Integer))
    for pattern, placeholder in _FOLDS:
        text = func.regexp_replace(text, _text(pattern), _text(placeholder), _text("g"))
    return func.left(text, literal(GROUP_TEXT, type_=Integer))


def exception_type(errors: ColumnElement[Any]) -> ColumnElement[str | None]:
    """V2: the exception type the newest entry of the error history's traceback names."""
    traceback = func.jsonb_extract_path_text(errors, _text("-1"), _text("traceback"))
    tail = func.right(traceback, literal(_TRACEBACK_TAIL, type_=Integer))
    return func.substring(tail, _text(_EXCEPTION_LINE))


def _group_matches(typed: bool) -> list[ColumnElement[bool]]:
    """``:error`` (a folded key) and, when ``typed``, ``:error_type``: NULL-safe equality."""
    key = folded(dead_jobs.c.last_error).is_not_distinct_from(bindparam("p_error", type_=Text))
    if not typed:
        return [key]
    kind = exception_type(dead_jobs.c.errors)
    return [key, kind.is_not_distinct_from(bindparam("p_error_type", type_=Text))]


@cache
def dead_groups() -> Select[Any]:
    """``(error_type, error, count, newest died_at, newest id, longest error in bytes)``
    of the newest dead rows.

    Biggest group first; ``error`` is the folded key (NULL: no error text).
    """
    newest = (
        select(
            dead_jobs.c.id,
            dead_jobs.c.died_at,
            folded(dead_jobs.c.last_error).label("error"),
            exception_type(dead_jobs.c.errors).label("error_type"),
            # From the value's header: no long text is read to learn its size.
            func.octet_length(dead_jobs.c.last_error).label("size"),
        )
        .where(dead_jobs.c.queue == queue_param())
        .order_by(dead_jobs.c.died_at.desc())
        .limit(literal(GROUP_WINDOW, type_=Integer))
        .subquery("newest")
    )
    return (
        select(
            newest.c.error_type,
            newest.c.error,
            func.count().label("n"),
            func.max(newest.c.died_at).label("last_died_at"),
            func.max(newest.c.id).label("last_id"),
            func.max(newest.c.size).label("longest"),
        )
        .group_by(newest.c.error_type, newest.c.error)
        .order_by(func.count().desc(), newest.c.error, newest.c.error_type)
        .limit(limit_param())
    )


def _oldest_ids(*where: ColumnElement[bool]) -> Select[tuple[int]]:
    """The oldest ``:limit`` matching dead ids of ``:queue`` (O2's order: died_at, then id)."""
    return (
        select(dead_jobs.c.id)
        .where(dead_jobs.c.queue == queue_param(), *where)
        .order_by(dead_jobs.c.died_at, dead_jobs.c.id)
        .limit(limit_param())
    )


@cache
def dead_ids_oldest() -> Select[tuple[int]]:
    """The oldest ``:limit`` dead ids of ``:queue``."""
    return _oldest_ids()


@cache
def dead_ids_of_group() -> Select[tuple[int]]:
    """The oldest ``:limit`` dead ids of ``:queue`` whose folded error is ``:error``."""
    return _oldest_ids(*_group_matches(typed=False))


@cache
def dead_ids_of_typed_group() -> Select[tuple[int]]:
    """As ``dead_ids_of_group``, and whose exception type is ``:error_type``."""
    return _oldest_ids(*_group_matches(typed=True))


def _dead_page(typed: bool) -> Select[Any]:
    return (
        select(*dead_row_columns())
        .where(
            dead_jobs.c.queue == queue_param(),
            *_group_matches(typed),
            dead_jobs.c.id < below_param(),
        )
        .order_by(dead_jobs.c.id.desc())
        .limit(limit_param())
    )


@cache
def dead_page_of_group() -> Select[Any]:
    """A page of one error group's dead rows (ids below ``:before``), newest first."""
    return _dead_page(typed=False)


@cache
def dead_page_of_typed_group() -> Select[Any]:
    """``dead_page_of_group`` narrowed to the exception type ``:error_type``."""
    return _dead_page(typed=True)


def _pending_page(when: ColumnElement[bool]) -> Select[Any]:
    """O1 lists pending rows; the queue page also splits them as O5 counts them."""
    return (
        select(*live_row_columns())
        .where(
            jobs.c.queue == queue_param(),
            jobs.c.status == PENDING,
            when,
            unexpired(),
            jobs.c.id < below_param(),
        )
        .order_by(jobs.c.id.desc())
        .limit(limit_param())
    )


@cache
def due_page() -> Select[Any]:
    """A page of this queue's due rows, unexpired, newest first."""
    return _pending_page(jobs.c.run_at <= NOW)


@cache
def scheduled_page() -> Select[Any]:
    """A page of this queue's scheduled (future) rows, unexpired, newest first."""
    return _pending_page(jobs.c.run_at > NOW)


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
        .where(jobs.c.status == PROCESSING)
        .group_by(jobs.c.worker_id, jobs.c.queue)
        .order_by(jobs.c.worker_id, jobs.c.queue)
        .limit(limit_param())
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
        .where(jobs.c.status == PROCESSING)
        .order_by(jobs.c.claim_deadline, jobs.c.id)
        .limit(limit_param())
    )


def _throughput(*where: ColumnElement[bool]) -> Select[Any]:
    """Per minute of the last hour: acked, retried, dead."""
    return (
        select(
            throughput.c.minute,
            func.sum(throughput.c.acked).label("acked"),
            func.sum(throughput.c.retried).label("retried"),
            func.sum(throughput.c.dead).label("dead"),
        )
        .where(throughput.c.minute >= last_hour(), *where)
        .group_by(throughput.c.minute)
        .order_by(throughput.c.minute)
    )


@cache
def throughput_all() -> Select[Any]:
    """The last hour's counts of every queue together."""
    return _throughput()


@cache
def throughput_of_queue() -> Select[Any]:
    """The last hour's counts of ``:queue``."""
    return _throughput(throughput.c.queue == queue_param())
