"""Pieces every statement shares: the clock, the common parameters and predicates
(this queue, a limit, a keyset start, not expired), the claim predicate, the dead
move, row shapes."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    CTE,
    BigInteger,
    ColumnElement,
    DateTime,
    Integer,
    LargeBinary,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import JSONPATH
from sqlalchemy.sql.expression import FromClause

from ..._values.job import ERROR_HISTORY_LIMIT, LIVE_COLUMNS
from ...schema import completed_jobs, dead_jobs, jobs, paused_queues

# Deadlines and due times are judged against the statement's own start time
# ("Shape" in docs/semantics.md): the same for every row one statement
# touches, and not the start of a caller's long transaction.
NOW: ColumnElement[object] = func.statement_timestamp(type_=DateTime(timezone=True))

# last_error of a job that ran out of attempts, whether its claim lapsed
# (Q12) or retry() found none left (Q18).
MAX_ATTEMPTS_ERROR = "max attempts exceeded"
_SET_ON_DEATH = ("last_error", "died_at", "errors")
DEAD_COPY_COLUMNS = [c.name for c in dead_jobs.c if c.name not in _SET_ON_DEATH]
# The live table's columns a caller reads, in LIVE_COLUMNS order: jobs.* less
# the internal deadline_floor (heartbeats without index churn).
LIVE = [jobs.c[name] for name in LIVE_COLUMNS]
# The job statuses, rendered into the text (``literal_execute``): a generic plan
# uses the partial indexes (``WHERE status = 'pending'``) only if it sees them.
PENDING: ColumnElement[str] = literal("pending", type_=Text, literal_execute=True)
PROCESSING: ColumnElement[str] = literal("processing", type_=Text, literal_execute=True)
# The largest bigint: "before no id" when ``:before`` is NULL (bound, not pasted).
MAX_ID = 2**63 - 1


@cache
def clock() -> Select[Any]:
    """The statement's time, alone: a page's or a schedule's "now" (the database's clock)."""
    return select(NOW)


def queue_param() -> ColumnElement[str]:
    """``:queue``, the queue a statement is about."""
    return bindparam("p_queue", type_=Text)


def this_queue() -> ColumnElement[bool]:
    """The job is in ``:queue``."""
    return jobs.c.queue == queue_param()


def not_paused() -> ColumnElement[bool]:
    """O4: this queue has no row in ``paused_queues`` (uncorrelated: a one-time filter)."""
    return ~(select(paused_queues.c.queue).where(paused_queues.c.queue == queue_param()).exists())


def batch_param() -> ColumnElement[int]:
    """``:n``, how many jobs a claim takes at most, rendered into the text (an ``int``,
    ``literal_execute``): a generic plan costs a ``LIMIT`` it cannot see at a
    tenth of the queue, and would never be chosen (``_render.py``)."""
    return bindparam("p_n", type_=Integer, literal_execute=True)


def limit_param() -> ColumnElement[int]:
    """``:limit``, how many rows a listing returns at most."""
    return bindparam("p_limit", type_=Integer)


def job_ids_param() -> ColumnElement[Any]:
    """``:job_ids``, a bigint array."""
    return bindparam("p_job_ids", type_=ARRAY(BigInteger))


def below_param() -> ColumnElement[int]:
    """A keyset page's upper bound: ``:before``, or above every id when it is NULL.

    ``coalesce`` rather than ``IS NULL OR``, so the id bound stays an index
    condition in every plan.
    """
    return func.coalesce(bindparam("p_before", type_=BigInteger), literal(MAX_ID, BigInteger))


def unexpired(table: FromClause = jobs) -> ColumnElement[bool]:
    """Q10: the row has no expiry, or it is still ahead."""
    return or_(table.c.expires_at.is_(None), table.c.expires_at > NOW)


def lapsed() -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    """A processing row whose claim lapsed, in a form ``jobs_lapse_ix`` serves.

    ``deadline_floor`` (indexed, never above ``claim_deadline``) finds the
    candidates; ``claim_deadline`` (not indexed, moved by heartbeats) decides.
    """
    return jobs.c.deadline_floor <= NOW, jobs.c.claim_deadline <= NOW


def extend_claim(deadline: ColumnElement[Any]) -> dict[str, ColumnElement[Any]]:
    """A heartbeat's SET: the new deadline; the floor only ever comes down.

    An extension leaves ``deadline_floor`` as it was (the same value: PostgreSQL
    can then make the update HOT); a shortened claim lowers it, so the
    lapse index still finds the row the moment its deadline passes.
    """
    return {
        "claim_deadline": deadline,
        "deadline_floor": func.least(jobs.c.deadline_floor, deadline),
    }


def claim_is_held() -> ColumnElement[bool]:
    """Q14: the row is processing, unexpired, and still this claim's.

    A claim is (job id, attempts at the claim): a reclaim bumps attempts, so
    an older handle of the same worker stops matching.
    """
    return and_(
        jobs.c.id == bindparam("p_job_id", type_=jobs.c.id.type),
        jobs.c.attempts == bindparam("p_attempts", type_=Integer),
        jobs.c.status == PROCESSING,
        jobs.c.claim_deadline > NOW,
    )


def id_among(ids: Select[tuple[int]]) -> ColumnElement[bool]:
    """``jobs.id = ANY(ARRAY(<ids>))``: the ids are collected first, then looked up.

    Same rows as ``jobs.id IN (<ids>)``, but the planner sees a sub-select
    run once and an index lookup by value instead of a semi-join to plan
    (about a fifth of the claim's planning time, which is paid on every
    claim: PostgreSQL re-plans it for its ``LIMIT``).
    """
    return jobs.c.id == any_(func.array(ids.scalar_subquery()))


def traceback_param() -> ColumnElement[str | None]:
    """The handler's traceback a Worker passes with a retry or fail (B2); NULL otherwise."""
    return cast(bindparam("p_traceback", type_=Text), Text)


def with_error(
    errors: ColumnElement[Any],
    attempt: ColumnElement[int],
    error: ColumnElement[Any],
    traceback: ColumnElement[str | None] | None = None,
) -> ColumnElement[Any]:
    """B2: ``errors`` with one entry appended, keeping the newest ERROR_HISTORY_LIMIT.

    The keys and the slice are bound like any value (the statement text
    holds no literal).
    """

    def key(name: str) -> ColumnElement[str]:
        return literal(name, type_=Text)

    entry = func.jsonb_build_object(
        key("attempt"),
        attempt,
        key("at"),
        NOW,
        key("error"),
        cast(error, Text),
        key("traceback"),
        null() if traceback is None else traceback,
    )
    grown = func.coalesce(errors, func.jsonb_build_array()).op("||")(func.jsonb_build_array(entry))
    newest = cast(literal(f"$[last - {ERROR_HISTORY_LIMIT - 1} to last]", type_=Text), JSONPATH)
    return func.jsonb_path_query_array(grown, newest)


def move_to_dead(
    where: ColumnElement[bool] | Select[tuple[int]],
    last_error: ColumnElement[str | None],
    name: str,
    traceback: ColumnElement[str | None] | None = None,
) -> CTE:
    """DELETE the matching live rows and INSERT them into ``dead_jobs``.

    ``where`` is either a predicate on ``jobs`` or a SELECT of ids (used where
    the rows must be locked with SKIP LOCKED first).  Returns the INSERT as a
    CTE whose rows are the buried ids; add it to a statement with
    ``add_cte`` or select from it.  The move appends ``last_error`` (and
    ``traceback``, when given) to the row's error history (B2).
    """
    condition = id_among(where) if isinstance(where, Select) else where
    moved = delete(jobs).where(condition).returning(*jobs.c).cte(f"{name}_moved")
    source = select(
        *(moved.c[col] for col in DEAD_COPY_COLUMNS),
        last_error.label("last_error"),
        NOW.label("died_at"),
        with_error(moved.c.errors, moved.c.attempts, last_error, traceback).label("errors"),
    )
    return (
        insert(dead_jobs)
        .from_select([*DEAD_COPY_COLUMNS, *_SET_ON_DEATH], source)
        .returning(dead_jobs.c.id)
        .cte(name)
    )


def _no_time(name: str) -> ColumnElement[Any]:
    return null().cast(DateTime(timezone=True)).label(name)


def _no_result() -> ColumnElement[Any]:
    return null().cast(LargeBinary).label("result")


def keep_completed(moved: CTE, result: ColumnElement[Any], name: str) -> CTE:
    """R1: INSERT the ``moved`` rows that carry the stamp into ``completed_jobs``.

    ``moved`` is a ``DELETE ... RETURNING *`` of ``jobs`` (a CTE); ``result``
    the value stored for each (a bound parameter, or a column of ``moved``).
    Returns the INSERT as a CTE whose rows are the kept ids.
    """
    copied = [c.name for c in completed_jobs.c if c.name in jobs.c]
    source = select(
        *(moved.c[col] for col in copied),
        result.label("result"),
        NOW.label("finished_at"),
        (NOW + moved.c.keep_completed).label("keep_until"),
    ).where(moved.c.keep_completed.is_not(None))
    return (
        insert(completed_jobs)
        .from_select([*copied, "result", "finished_at", "keep_until"], source)
        .returning(completed_jobs.c.id)
        .cte(name)
    )


def notify_once(rows: Any, channel: str, name: str, label: str) -> CTE:
    """One empty ``pg_notify`` on ``:<channel>`` when ``rows`` has a row (the
    listener re-reads), as the CTE ``name`` with the column ``label``."""
    return (
        select(func.pg_notify(bindparam(channel, type_=Text), literal("", type_=Text)).label(label))
        .select_from(rows)
        .limit(literal(1, type_=Integer))
        .cte(name)
    )


def notify_done(rows: CTE) -> CTE:
    """R3: one ``pg_notify`` on ``:done_channel`` when ``rows`` has a row (waiters re-read)."""
    return notify_once(rows, "p_done_channel", "told", "told")


def notify_cancelled(rows: CTE) -> CTE:
    """C1: one ``pg_notify`` on ``:control_channel`` naming the claimed rows of
    ``rows`` (``cancel:<id>,<id>...``), none when no claimed row went.  Sent at
    the commit of the statement's transaction, like every NOTIFY."""
    ids = func.string_agg(rows.c.id.cast(Text), literal(",", type_=Text))
    return (
        select(
            func.pg_notify(
                bindparam("p_control_channel", type_=Text),
                literal("cancel:", type_=Text) + ids,
            ).label("told")
        )
        .select_from(rows)
        .where(rows.c.status == PROCESSING)
        .having(func.count() > literal(0, type_=Integer))
        .cte("told_worker")
    )


def live_row_columns() -> list[ColumnElement[Any]]:
    """A live row as callers read it: ``LIVE`` then NULL ``died_at``, ``result``,
    ``finished_at`` (``Job.from_live``'s three extras, ``ROW_EXTRAS``)."""
    return [*LIVE, _no_time("died_at"), _no_result(), _no_time("finished_at")]


def dead_row_columns() -> list[ColumnElement[Any]]:
    """A dead row in the same shape: ``status`` = ``'dead'``, then ``died_at``."""
    return [
        *(
            literal("dead", type_=Text).label("status")
            if col.name == "status"
            else dead_jobs.c[col.name]
            for col in LIVE
        ),
        dead_jobs.c.died_at,
        _no_result(),
        _no_time("finished_at"),
    ]


def completed_row_columns() -> list[ColumnElement[Any]]:
    """A kept completed row (R1) in the same shape: ``status`` = ``'completed'``."""
    return [
        *(
            literal("completed", type_=Text).label("status")
            if col.name == "status"
            else completed_jobs.c[col.name]
            for col in LIVE
        ),
        _no_time("died_at"),
        completed_jobs.c.result,
        completed_jobs.c.finished_at,
    ]


# How many columns the row shapes above add after ``LIVE``.
ROW_EXTRAS = 3


def error_or(default: str) -> ColumnElement[str | None]:
    """The caller's ``error`` parameter, else ``default`` (both bound, never pasted)."""
    return func.coalesce(bindparam("p_error", type_=Text), literal(default, type_=Text))


def wake_once_if_any(rows: CTE) -> CTE:
    """One ``pg_notify`` on the queue's channel when ``rows`` has a row, none when empty.

    Joined into the statement's result, so it runs in the statement's own
    transaction: a rollback wakes no one (Q7).
    """
    return (
        select(
            func.pg_notify(bindparam("p_channel", type_=Text), literal("", type_=Text)).label(
                "woke"
            )
        )
        .select_from(rows)
        .limit(literal(1, type_=Integer))
        .cte("wake")
    )
