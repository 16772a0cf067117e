"""Statements for one claimed job: ack, heartbeat, retry, fail (SPEC Q14-Q19).

Each is guarded by ``claim_is_held()`` (SPEC Q14) and returns one row per
job it touched, so the caller learns ``True``/``False`` from the row count.
"""

from __future__ import annotations

from functools import cache

from sqlalchemy import Interval, Select, Text, bindparam, delete, func, select, update
from sqlalchemy.sql.dml import ReturningDelete, ReturningUpdate

from ..schema import jobs
from ._common import NOW, claim_is_held, error_or, move_to_dead

__all__ = ["RETRY_EXHAUSTED_ERROR", "FAIL_DEFAULT_ERROR", "ack", "fail", "heartbeat", "retry"]

RETRY_EXHAUSTED_ERROR = "max attempts exceeded"
FAIL_DEFAULT_ERROR = "failed"


@cache
def ack() -> ReturningDelete[tuple[int]]:
    """SPEC Q16: an ack deletes the row."""
    return delete(jobs).where(claim_is_held()).returning(jobs.c.id)


@cache
def heartbeat() -> ReturningUpdate[tuple[int]]:
    """SPEC Q15: ``claim_deadline = now + :extend`` (absolute, not additive)."""
    return (
        update(jobs)
        .where(claim_is_held())
        .values(claim_deadline=NOW + bindparam("p_extend", type_=Interval))
        .returning(jobs.c.id)
    )


@cache
def retry() -> Select[tuple[int]]:
    """SPEC Q17/Q18: back to pending after ``:delay``, or to dead when exhausted.

    ``:error`` NULL keeps the row's previous ``last_error`` on the pending
    path and reads ``max attempts exceeded`` on the dead path.
    """
    requeued = (
        update(jobs)
        .where(claim_is_held(), jobs.c.attempts < jobs.c.max_attempts)
        .values(
            status="pending",
            run_at=NOW + bindparam("p_delay", type_=Interval),
            worker_id=None,
            claim_deadline=None,
            last_error=func.coalesce(bindparam("p_error", type_=Text), jobs.c.last_error),
        )
        .returning(jobs.c.id)
        .cte("requeued")
    )
    buried = move_to_dead(
        claim_is_held() & (jobs.c.attempts >= jobs.c.max_attempts),
        error_or(RETRY_EXHAUSTED_ERROR),
        "buried",
    )
    return select(requeued.c.id).union_all(select(buried.c.id))  # type: ignore[return-value]


@cache
def fail() -> Select[tuple[int]]:
    """SPEC Q19: straight to dead, ``last_error`` = ``:error`` or ``failed``."""
    buried = move_to_dead(claim_is_held(), error_or(FAIL_DEFAULT_ERROR), "buried")
    return select(buried.c.id)
