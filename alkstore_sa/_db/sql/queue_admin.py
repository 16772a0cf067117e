"""The operator's statements on a queue as a whole (O1-O4): list, requeue, purge,
pause, resume.  (Reads and moves by id for anyone are in ``queue_wide``.)

None of these is on a worker's path except the pause, which the claim reads
(``_common.not_paused``).  Each is one statement, so it sees one snapshot and,
run on the store's own connection, is one transaction.

Where a count or a listing could be read from the whole table, the
statement is split by status so each part walks the index its status has:
pending rows through ``jobs_claim_ix``, processing rows through
``jobs_lapse_ix`` (both partial indexes led by ``queue``), dead rows through
``dead_jobs_queue_died_at_ix``.  Their cost follows the queue's own rows,
not the table's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Integer,
    Interval,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...schema import completed_jobs, dead_jobs, jobs, paused_queues
from ._common import (
    NOW,
    PENDING,
    PROCESSING,
    below_param,
    completed_row_columns,
    dead_row_columns,
    job_ids_param,
    limit_param,
    live_row_columns,
    queue_param,
    wake_once_if_any,
)
from .flow import LIMIT_COLUMNS

__all__ = [
    "list_jobs",
    "pause",
    "purge_dead_all",
    "purge_dead_ids",
    "requeue_dead_ids",
    "requeue_dead_oldest",
    "resume",
]

# -- O1: list a queue's jobs ----------------------------------------------------


@cache
def list_jobs() -> Select[Any]:
    """O1: this queue's rows, live and dead, newest (highest id) first.

    Parameters: ``queue``, ``status`` (``'pending'``, ``'processing'``,
    ``'dead'`` or NULL for all), ``before`` (only ids below it; NULL for
    none), ``limit``.  One branch per status, each cut to ``limit`` in id
    order, then the first ``limit`` of the three.  A branch whose status is
    not asked for is switched off by a one-time filter (no scan at all).
    """
    status = bindparam("p_status", type_=Text)
    below = below_param()

    def wanted(name: str) -> ColumnElement[bool]:
        return or_(status.is_(None), status == literal(name, type_=Text))

    def branch(table: Table, columns: list[ColumnElement[Any]], *where: Any) -> Select[Any]:
        return (
            select(*columns)
            .where(table.c.queue == queue_param(), table.c.id < below, *where)
            .order_by(table.c.id.desc())
            .limit(limit_param())
        )

    rows = union_all(
        branch(jobs, live_row_columns(), jobs.c.status == PENDING, wanted("pending")),
        branch(jobs, live_row_columns(), jobs.c.status == PROCESSING, wanted("processing")),
        branch(dead_jobs, dead_row_columns(), wanted("dead")),
        branch(completed_jobs, completed_row_columns(), wanted("completed")),
    ).subquery("listed")
    return select(*rows.c).order_by(rows.c.id.desc()).limit(limit_param())


# -- O2: requeue dead rows --------------------------------------------------------


def _requeue(*where: ColumnElement[bool]) -> Select[Any]:
    """Move the oldest ``:limit`` matching dead rows of ``:queue`` back to pending.

    Same id, payload, priority, max_attempts, visibility_timeout, created_at,
    last_error, error history (B2), trace context (B3) and unique key (U1);
    ``attempts = 0``, ``run_at = now``, no expiry, no claim.
    The dead rows are locked with SKIP LOCKED first, so two requeues (or a
    requeue and a purge) never move one row twice.  They are inserted into
    ``jobs`` ``ON CONFLICT DO NOTHING`` against the unique-key index, and
    only the rows that went in are deleted from ``dead_jobs``: a dead job
    whose key is live again stays dead (U1), and so do all but the first to
    die of several dead jobs sharing a key.  One row back: how many moved,
    and how many notifications were sent (1 when any moved, else 0).
    """
    picked = (
        select(dead_jobs.c.id)
        .where(dead_jobs.c.queue == queue_param(), *where)
        .order_by(dead_jobs.c.died_at, dead_jobs.c.id)
        .limit(limit_param())
        .with_for_update(skip_locked=True)
    )
    dead = dead_jobs.alias("dead")  # the picked rows, read again by id
    kept = (
        "id",
        "queue",
        "payload",
        "priority",
        "max_attempts",
        "visibility_timeout",
        "created_at",
        "last_error",
        "errors",
        "trace_context",
        "unique_key",
        "keep_completed",  # R1: the stamp goes back with the job
        "grp",  # F3: and its group
        "workflow_id",  # G2: a requeued step goes back to its workflow
    )
    source = (
        select(
            *(dead.c[name] for name in kept),
            literal("pending", type_=Text),
            NOW,
            literal(0, type_=Integer),
        )
        .where(dead.c.id == any_(func.array(picked.scalar_subquery())))
        # Of dead rows sharing a key, the first to die goes back.
        .order_by(dead.c.died_at, dead.c.id)
    )
    inserted = (
        pg_insert(jobs)
        .from_select([*kept, "status", "run_at", "attempts"], source)
        .on_conflict_do_nothing(
            index_elements=[jobs.c.queue, jobs.c.unique_key],
            index_where=jobs.c.unique_key.is_not(None),
        )
        .returning(jobs.c.id)
        .cte("requeued")
    )
    moved = (
        delete(dead_jobs)
        .where(dead_jobs.c.id == any_(func.array(select(inserted.c.id).scalar_subquery())))
        .returning(dead_jobs.c.id)
        .cte("moved")
    )
    wake = wake_once_if_any(inserted)
    return select(
        select(func.count()).select_from(moved).scalar_subquery().label("moved"),
        select(func.count()).select_from(wake).scalar_subquery().label("woke"),
    )


@cache
def requeue_dead_oldest() -> Select[Any]:
    """O2 with no ids: the queue's oldest ``:limit`` dead rows (died_at, then id)."""
    return _requeue()


@cache
def requeue_dead_ids() -> Select[Any]:
    """O2 for ``:job_ids``: those that are dead rows of this queue (others skipped)."""
    return _requeue(dead_jobs.c.id == any_(job_ids_param()))


# -- O3: purge dead rows ----------------------------------------------------------


def _counted(stmt: Delete) -> Select[Any]:
    gone = stmt.returning(literal(1, type_=Integer).label("one")).cte("purged")
    return select(func.count()).select_from(gone)


@cache
def purge_dead_all() -> Select[Any]:
    """O3 with no ids and no age: every dead row of ``:queue``; returns the count.

    (With an age and no ids it is ``queue.purge_dead``, the retention purge.)
    """
    return _counted(delete(dead_jobs).where(dead_jobs.c.queue == queue_param()))


@cache
def purge_dead_ids() -> Select[Any]:
    """O3 for ``:job_ids``: those dead rows of ``:queue``, older than ``:older_than`` if given."""
    # Cast: psycopg sends None untyped, and ``$n IS NULL`` alone cannot type it.
    older_than = cast(bindparam("p_older_than", type_=Interval), Interval)
    return _counted(
        delete(dead_jobs).where(
            dead_jobs.c.id == any_(job_ids_param()),
            dead_jobs.c.queue == queue_param(),
            or_(older_than.is_(None), dead_jobs.c.died_at < NOW - older_than),
        )
    )


# -- O4: pause, resume --------------------------------------------------------------


@cache
def pause() -> Insert:
    """O4: pause ``:queue`` in its settings row; a row back only when it was not paused.

    A row that holds the queue's limits (F1) keeps them: the pause is its
    ``paused_at``.
    """
    insert = pg_insert(paused_queues).values(queue=queue_param(), paused_at=NOW)
    return insert.on_conflict_do_update(
        index_elements=[paused_queues.c.queue],
        set_={"paused_at": insert.excluded.paused_at},
        where=paused_queues.c.paused_at.is_(None),
    ).returning(paused_queues.c.queue)


@cache
def resume() -> Select[Any]:
    """O4: remove the pause of ``:queue`` and, only if there was one, wake ``:channel``.

    One row back: 1 when a pause was removed (and the notification sent at
    commit), else 0.
    """
    # A row with limits (F1) stays, unpaused; one with a pause only goes.
    limited = or_(*(paused_queues.c[name].is_not(None) for name in LIMIT_COLUMNS))
    this = (paused_queues.c.queue == queue_param(), paused_queues.c.paused_at.is_not(None))
    deleted = delete(paused_queues).where(*this, ~limited).returning(paused_queues.c.queue)
    cleared = (
        update(paused_queues)
        .where(*this, limited)
        .values(paused_at=None)
        .returning(paused_queues.c.queue)
    )
    removed = union_all(
        select(deleted.cte("deleted").c.queue), select(cleared.cte("cleared").c.queue)
    ).cte("removed")
    wake = (
        select(
            func.pg_notify(bindparam("p_channel", type_=Text), literal("", type_=Text)).label(
                "woke"
            )
        )
        .select_from(removed)
        .cte("wake")
    )
    return select(func.count()).select_from(wake)
