"""Statements on a queue's rows by id or by age, for anyone (docs/semantics.md "Queue-wide
operations", Q22-Q25): ack_batch, cancel, get_job, the sweep's burials and
retention purge, and the schema probe.  The operator's listing and bulk moves
(O1-O4) are in ``queue_admin``."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    CompoundSelect,
    Interval,
    LargeBinary,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    delete,
    literal,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.sql.dml import ReturningDelete

from ...schema import completed_jobs, dead_jobs, jobs, metadata, workflow_steps, workflows
from ._common import (
    NOW,
    PROCESSING,
    completed_row_columns,
    dead_row_columns,
    job_ids_param,
    keep_completed,
    live_row_columns,
    move_to_dead,
    notify_cancelled,
    notify_done,
    queue_param,
)
from .lapsed import bury_lapsed_exhausted
from .workflow_reads import waiting_job

__all__ = [
    "EXPIRED_ERROR",
    "ack_batch",
    "ack_batch_unkept",
    "bury_expired",
    "bury_lapsed",
    "cancel",
    "get_job",
    "purge_completed",
    "purge_dead",
    "schema_probe",
]

EXPIRED_ERROR = "expired"


def _held_by_this_queue() -> tuple[ColumnElement[bool], ...]:
    """Q22's predicate: the Q14 claim check without its attempts clause (a batch
    ack has only ids)."""
    return (
        jobs.c.id == any_(job_ids_param()),
        jobs.c.queue == queue_param(),
        jobs.c.status == PROCESSING,
        jobs.c.claim_deadline > NOW,
    )


@cache
def ack_batch_unkept() -> ReturningDelete[tuple[int]]:
    """Q22 for the ``:job_ids`` rows without keep_completed: a plain DELETE.

    The common case, and the first release's statement: ``ack_batch`` runs
    only when some ids are left over (kept, or no longer held).
    """
    return (
        delete(jobs)
        .where(*_held_by_this_queue(), jobs.c.keep_completed.is_(None))
        .returning(jobs.c.id)
    )


@cache
def ack_batch() -> Select[tuple[int]]:
    """Q22: delete each ``:job_ids`` row this queue still holds unlapsed.

    Rows stamped with keep_completed move to ``completed_jobs`` with no
    result (R1), and ``:done_channel`` is told once when any did (R3).
    """
    moved = delete(jobs).where(*_held_by_this_queue()).returning(*jobs.c).cte("acked")
    kept = keep_completed(moved, null().cast(LargeBinary), "kept")
    told = notify_done(kept)
    return select(moved.c.id).select_from(moved.outerjoin(told, true()))


@cache
def purge_completed() -> ReturningDelete[tuple[int]]:
    """R1: delete this queue's kept completed jobs whose time is up."""
    return (
        delete(completed_jobs)
        .where(
            completed_jobs.c.queue == bindparam("p_queue", type_=Text),
            completed_jobs.c.keep_until <= NOW,
        )
        .returning(completed_jobs.c.id)
    )


@cache
def cancel() -> CompoundSelect[tuple[int]]:
    """Q23: delete a live row of this queue, whatever its state; G2: a step too.

    C1: a claimed (processing) row is named on ``:control_channel`` too, so
    the worker running it stops it (``notify_cancelled``).  A workflow step
    (waiting, or live) is marked cancelled in the same statement; a trigger
    on that mark cancels its waiting downstream steps (migration 0013), and
    the row's delete trigger then finds it cancelled, not acked.  For a job
    of no workflow the mark is one primary-key probe that finds nothing.
    One row per cancelled id (a live step: twice).

    Lock order (G2): a waiting step is marked only once its workflow's row
    is locked (``locked``, read by the mark's filter, so before the mark
    locks the step), the order of the ack's promotion and the death's
    cascade, which lock the workflow and then the steps they count or bury;
    the other order deadlocked.  A live step is marked only if this
    statement deleted its row: a step promoted while the cancel waited for
    the lock is in ``jobs`` after this statement's snapshot, so nothing is
    cancelled and the caller runs the statement again (``ops.cancel``).
    """
    job_id = bindparam("p_job_id", type_=BigInteger)
    deleted = (
        delete(jobs)
        .where(jobs.c.id == job_id, jobs.c.queue == queue_param())
        .returning(jobs.c.id, jobs.c.status)
        .cte("deleted")
    )
    waiting = (
        select(workflow_steps.c.workflow_id)
        .where(
            workflow_steps.c.id == job_id,
            workflow_steps.c.queue == queue_param(),
            workflow_steps.c.state == literal("waiting", type_=Text),
        )
        .scalar_subquery()
    )
    locked = (
        select(workflows.c.id)
        .where(workflows.c.id == waiting)
        .with_for_update(key_share=True)
        .cte("locked")
    )
    marked = (
        update(workflow_steps)
        .where(
            workflow_steps.c.id == job_id,
            workflow_steps.c.queue == queue_param(),
            or_(
                and_(
                    workflow_steps.c.state == literal("waiting", type_=Text),
                    select(locked.c.id).exists(),
                ),
                and_(
                    workflow_steps.c.state == literal("live", type_=Text),
                    workflow_steps.c.id.in_(select(deleted.c.id)),
                ),
            ),
        )
        .values(state="cancelled", payload=None)
        .returning(workflow_steps.c.id)
        .cte("marked")
    )
    told = notify_cancelled(deleted)
    return (
        select(deleted.c.id)
        .select_from(deleted.outerjoin(told, true()))
        .union_all(select(marked.c.id))
    )


@cache
def get_job() -> CompoundSelect[Any]:
    """Q24: the live row, else the dead one, else the kept completed one (R1),
    else a waiting workflow step (G1); each row ends with ``waiting_on``
    (the step's unacked upstream ids; NULL for the other three)."""
    job_id = bindparam("p_job_id", type_=BigInteger)
    queue = queue_param()
    none = null().cast(ARRAY(BigInteger)).label("waiting_on")
    live = select(*live_row_columns(), none).where(jobs.c.id == job_id, jobs.c.queue == queue)
    dead = select(*dead_row_columns(), none).where(
        dead_jobs.c.id == job_id, dead_jobs.c.queue == queue
    )
    kept = select(*completed_row_columns(), none).where(
        completed_jobs.c.id == job_id, completed_jobs.c.queue == queue
    )
    return live.union_all(dead, kept, waiting_job())


@cache
def bury_lapsed() -> Select[tuple[int]]:
    """Q12 for sweep_expired(): exhausted lapsed claims to dead."""
    buried = bury_lapsed_exhausted("buried")
    return select(buried.c.id)


@cache
def bury_expired() -> Select[tuple[int]]:
    """Q25: every past-expiry row of this queue, pending or processing, to dead."""
    locked_ids = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == queue_param(),
            jobs.c.expires_at <= NOW,
        )
        .with_for_update(skip_locked=True)
    )
    buried = move_to_dead(locked_ids, literal(EXPIRED_ERROR, type_=Text), "buried")
    return select(buried.c.id)


@cache
def purge_dead() -> ReturningDelete[tuple[int]]:
    """Q25: drop this queue's dead rows older than ``:retention``."""
    return (
        delete(dead_jobs)
        .where(
            dead_jobs.c.queue == queue_param(),
            dead_jobs.c.died_at < NOW - bindparam("p_retention", type_=Interval),
        )
        .returning(dead_jobs.c.id)
    )


@cache
def schema_probe() -> Select[tuple[bool, ...]]:
    """B5: names every column of every table and reads no row.

    Fails with undefined_table or undefined_column (SchemaMissingError) when
    the migrations never ran or are behind this version of the package.
    """
    probes = [select(*table.c).limit(0).exists() for table in metadata.sorted_tables]
    return select(*probes)  # type: ignore[return-value]
