"""Statements for one claimed job: ack, heartbeat, retry, fail (Q14-Q19).

Each is guarded by ``claim_is_held()`` (Q14) and returns one row per
job it touched, so the caller learns ``True``/``False`` from the row count.
"""

from __future__ import annotations

from functools import cache

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Integer,
    Interval,
    LargeBinary,
    Select,
    Text,
    and_,
    any_,
    bindparam,
    delete,
    func,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.sql.dml import ReturningDelete, ReturningUpdate

from ...schema import completed_jobs, dead_jobs, jobs
from ._common import (
    MAX_ATTEMPTS_ERROR,
    NOW,
    PENDING,
    PROCESSING,
    claim_is_held,
    error_or,
    extend_claim,
    id_among,
    job_ids_param,
    keep_completed,
    move_to_dead,
    notify_done,
    traceback_param,
    with_error,
)

__all__ = [
    "FAIL_DEFAULT_ERROR",
    "RELEASED",
    "RELEASED_DEAD",
    "RETRIED",
    "RETRIED_DEAD",
    "RETRY_EXHAUSTED_ERROR",
    "ack",
    "ack_held",
    "ack_kept",
    "bury_undecodable",
    "fail",
    "heartbeat",
    "heartbeat_held",
    "release",
    "retry",
    "snooze",
]

RETRY_EXHAUSTED_ERROR = MAX_ATTEMPTS_ERROR
FAIL_DEFAULT_ERROR = "failed"
RELEASED = "released"  # release(): back to pending
RELEASED_DEAD = "dead"  # release(): no attempt left, dead-lettered
RETRIED = "retried"  # retry(): pending again
RETRIED_DEAD = "dead"  # retry(): no attempt left, dead-lettered


@cache
def ack() -> ReturningDelete[tuple[int]]:
    """Q16: an ack deletes the row."""
    return delete(jobs).where(claim_is_held()).returning(jobs.c.id)


@cache
def ack_kept() -> Select[tuple[int]]:
    """R1: the ack of a job stamped with keep_completed: moved, with ``:result``.

    The row leaves ``jobs`` and enters ``completed_jobs`` in one statement
    (so in the ack's transaction), and ``:done_channel`` is told once (R3).
    Returns the acked id (none when the claim is not held).
    """
    moved = delete(jobs).where(claim_is_held()).returning(*jobs.c).cte("acked")
    kept = keep_completed(moved, bindparam("p_result", type_=LargeBinary), "kept")
    told = notify_done(kept)
    return select(moved.c.id).select_from(moved.outerjoin(told, true()))


@cache
def heartbeat() -> ReturningUpdate[tuple[int]]:
    """Q15: ``claim_deadline = now + :extend`` (absolute, not additive)."""
    return (
        update(jobs)
        .where(claim_is_held())
        .values(extend_claim(NOW + bindparam("p_extend", type_=Interval)))
        .returning(jobs.c.id)
    )


@cache
def retry() -> Select[tuple[int, str]]:
    """Q17/Q18: back to pending after ``:delay``, or to dead when exhausted.

    ``:error`` NULL keeps the row's previous ``last_error`` on the pending
    path and reads ``max attempts exceeded`` on the dead path.  Either way
    the error (and ``:traceback``) is appended to the job's history (B2).
    Each row says which path it took: ``retried`` or ``dead``.
    """
    error = func.coalesce(bindparam("p_error", type_=Text), jobs.c.last_error)
    requeued = (
        update(jobs)
        .where(claim_is_held(), jobs.c.attempts < jobs.c.max_attempts)
        .values(
            status=PENDING,
            run_at=NOW + bindparam("p_delay", type_=Interval),
            worker_id=None,
            claim_deadline=None,
            last_error=error,
            errors=with_error(jobs.c.errors, jobs.c.attempts, error, traceback_param()),
        )
        .returning(jobs.c.id)
        .cte("requeued")
    )
    buried = move_to_dead(
        claim_is_held() & (jobs.c.attempts >= jobs.c.max_attempts),
        error_or(RETRY_EXHAUSTED_ERROR),
        "buried",
        traceback_param(),
    )
    told = notify_done(buried)  # R3: a death tells the waiters (once, when any)
    return select(requeued.c.id, literal(RETRIED, type_=Text)).union_all(  # type: ignore[return-value]
        select(buried.c.id, literal(RETRIED_DEAD, type_=Text)).select_from(
            buried.outerjoin(told, true())
        )
    )


@cache
def snooze() -> ReturningUpdate[tuple[int]]:
    """Z1: back to pending at ``now + :delay`` with the attempt refunded.

    No error is recorded (``last_error`` and the history stay as they
    were): a snooze is not a failure.  ``expires_at`` is untouched, so a
    job snoozed past its expiry is swept like any other (Q25).
    """
    return (
        update(jobs)
        .where(claim_is_held())
        .values(
            status=PENDING,
            run_at=NOW + bindparam("p_delay", type_=Interval),
            attempts=jobs.c.attempts - 1,
            worker_id=None,
            claim_deadline=None,
        )
        .returning(jobs.c.id)
    )


@cache
def fail() -> Select[tuple[int]]:
    """Q19: straight to dead, ``last_error`` = ``:error`` or ``failed`` (and in the history, B2)."""
    buried = move_to_dead(
        claim_is_held(), error_or(FAIL_DEFAULT_ERROR), "buried", traceback_param()
    )
    told = notify_done(buried)  # R3: a death tells the waiters
    return select(buried.c.id).select_from(buried.outerjoin(told, true()))


@cache
def bury_undecodable() -> Select[tuple[int]]:
    """A claimed row the client could not load: to dead at once, ``last_error`` = ``:error``.

    By id and this claim's worker, not by ``claim_is_held``: the claim just
    took it, and nothing of the row but its id is trusted.
    """
    held = and_(
        jobs.c.id == bindparam("p_job_id", type_=jobs.c.id.type),
        jobs.c.worker_id == bindparam("p_worker_id", type_=Text),
        jobs.c.status == PROCESSING,
    )
    buried = move_to_dead(held, bindparam("p_error", type_=Text), "buried")
    return select(buried.c.id)


def _claims_held() -> ColumnElement[bool]:
    """Q14 for many claims at once: ``(id, attempts)`` pairs from two arrays."""
    pairs = (
        func.unnest(
            bindparam("p_job_ids", type_=ARRAY(BigInteger)),
            bindparam("p_attempts_list", type_=ARRAY(Integer)),
        )
        .table_valued("job_id", "attempts")
        .render_derived()
    )
    mine = select(pairs.c.job_id).where(
        pairs.c.job_id == jobs.c.id, pairs.c.attempts == jobs.c.attempts
    )
    return and_(mine.exists(), jobs.c.status == PROCESSING, jobs.c.claim_deadline > NOW)


def _lock_held_in_id_order(*, key_share: bool) -> ColumnElement[bool]:
    """The held claims' rows, locked in ascending id order before they are touched.

    The worker's ack and heartbeat flushes run at the same time on two
    connections, may name the same jobs, and wait for row locks (they must
    not skip a row another statement holds for a moment).  Left to the plan,
    each would lock in whatever order its scan meets the rows, and two
    opposite orders deadlock.  ``ORDER BY id ... FOR UPDATE`` locks in sorted
    order (PostgreSQL locks above the sort), the same for every statement.
    """
    locked = (
        select(jobs.c.id)
        .where(_claims_held())
        .order_by(jobs.c.id)
        .with_for_update(key_share=key_share)
    )
    return id_among(locked)


@cache
def ack_held() -> ReturningDelete[tuple[int]]:
    """Ack many claims in one statement (the worker's batched acks).

    Unlike ``ack_batch`` this checks each claim's attempts, so a job that
    lapsed and was reclaimed elsewhere is never acked by its old claimant.
    """
    return delete(jobs).where(_lock_held_in_id_order(key_share=False)).returning(jobs.c.id)


@cache
def heartbeat_held() -> ReturningUpdate[tuple[int]]:
    """Extend many claims by each job's own visibility timeout (worker heartbeats)."""
    return (
        update(jobs)
        .where(_lock_held_in_id_order(key_share=True))
        .values(extend_claim(NOW + jobs.c.visibility_timeout))
        .returning(jobs.c.id)
    )


@cache
def still_there() -> Select[tuple[int]]:
    """C1's fallback: which of ``:job_ids`` still have a row, live, dead or kept.

    A held claim a heartbeat no longer extends whose job has none was
    cancelled (or acked elsewhere after a lapse): its handler is stopped.
    """
    rows = (
        select(jobs.c.id)
        .union_all(select(dead_jobs.c.id), select(completed_jobs.c.id))
        .subquery("rows")
    )
    return select(rows.c.id).where(rows.c.id == any_(job_ids_param()))


@cache
def release() -> Select[tuple[int, str]]:
    """Q27: a worker giving up a claim at shutdown: pending, due now.

    The attempt is not refunded; ``last_error`` is left as it was.  A claim
    on the job's last attempt has none left to give back: like a worker
    dying after its last claim (Q12), the job moves to dead with ``max
    attempts exceeded``, so no job runs more than ``max_attempts`` times.
    Each row says which: ``released`` or ``dead``.
    """
    released = (
        update(jobs)
        .where(claim_is_held(), jobs.c.attempts < jobs.c.max_attempts)
        .values(status=PENDING, run_at=NOW, worker_id=None, claim_deadline=None)
        .returning(jobs.c.id)
        .cte("released")
    )
    buried = move_to_dead(
        claim_is_held() & (jobs.c.attempts >= jobs.c.max_attempts),
        literal(MAX_ATTEMPTS_ERROR, type_=Text),
        "buried",
    )
    return select(released.c.id, literal(RELEASED, type_=Text)).union_all(  # type: ignore[return-value]
        select(buried.c.id, literal(RELEASED_DEAD, type_=Text))
    )
