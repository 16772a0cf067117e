"""Each queue operation, written once, over a sync SQLAlchemy ``Connection``.

The connection may be the store's own (autocommit), a ``Session``'s, or the
sync side of an ``AsyncSession``/``AsyncConnection`` reached through
``run_sync``; nothing here commits unless it owns the transaction.
Arguments arrive validated (see ``_core``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Executable, Result

from ._job import LIVE_COLUMNS, Job, SweepResult
from .sql import claim as claim_sql
from .sql import enqueue as enqueue_sql
from .sql import handle as handle_sql
from .sql import queue as queue_sql
from .sql._render import rendered

if TYPE_CHECKING:
    from ._core import Stamps, Target


def _run(conn: Connection, target: Target, stmt: Executable, params: dict[str, Any]) -> Result[Any]:
    # The statement's text is rendered once per dialect and schema (see
    # sql/_render.py): the same SQL and bound parameters as execute() sends.
    text = rendered(stmt, conn.dialect, target.schema)
    if text is None:
        return conn.execute(stmt, params, execution_options=target.execution_options)
    return conn.exec_driver_sql(text.sql, text.params(params))


def enqueue(
    conn: Connection, *, target: Target, payloads: list[bytes], stamps: Stamps
) -> list[int]:
    if not payloads:
        return []
    params = {
        "p_queue": target.queue,
        "p_payloads": payloads,
        "p_priority": stamps.priority,
        "p_run_at": stamps.run_at,
        "p_delay": stamps.delay,
        "p_max_attempts": stamps.max_attempts,
        "p_visibility_timeout": stamps.visibility_timeout,
        "p_expires_in": stamps.expires_in,
        "p_channel": target.channel,
    }
    # .all() fetches in one call; iterating would fetch row by row.
    return list(_run(conn, target, enqueue_sql.enqueue(), params).scalars().all())


def claim(conn: Connection, *, target: Target, worker_id: str, n: int) -> list[Job]:
    params = {"p_queue": target.queue, "p_worker_id": worker_id, "p_n": n}
    result = _run(conn, target, claim_sql.claim(), params)
    if tuple(result.keys()) == LIVE_COLUMNS:
        jobs = [Job.from_live(row) for row in result.all()]
    else:  # not expected: the claim returns jobs.*; read by name then
        jobs = [Job.from_row(row) for row in result.mappings().all()]
    # UPDATE ... RETURNING has no order; hand jobs out in claim order (SPEC Q9).
    jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
    return jobs


def _held(job_id: int, attempts: int) -> dict[str, Any]:
    return {"p_job_id": job_id, "p_attempts": attempts}


def ack(conn: Connection, *, target: Target, job_id: int, attempts: int) -> bool:
    result = _run(conn, target, handle_sql.ack(), _held(job_id, attempts))
    return result.first() is not None


def heartbeat(
    conn: Connection, *, target: Target, job_id: int, attempts: int, extend: timedelta
) -> bool:
    params = {**_held(job_id, attempts), "p_extend": extend}
    return _run(conn, target, handle_sql.heartbeat(), params).first() is not None


def retry(
    conn: Connection,
    *,
    target: Target,
    job_id: int,
    attempts: int,
    delay: timedelta,
    error: str | None,
) -> bool:
    params = {**_held(job_id, attempts), "p_delay": delay, "p_error": error}
    return _run(conn, target, handle_sql.retry(), params).first() is not None


def fail(
    conn: Connection, *, target: Target, job_id: int, attempts: int, error: str | None
) -> bool:
    params = {**_held(job_id, attempts), "p_error": error}
    return _run(conn, target, handle_sql.fail(), params).first() is not None


def release(conn: Connection, *, target: Target, job_id: int, attempts: int) -> bool:
    result = _run(conn, target, handle_sql.release(), _held(job_id, attempts))
    return result.first() is not None


def _claims(claims: list[tuple[int, int]]) -> dict[str, Any]:
    return {"p_job_ids": [c[0] for c in claims], "p_attempts_list": [c[1] for c in claims]}


def ack_held(conn: Connection, *, target: Target, claims: list[tuple[int, int]]) -> list[int]:
    """Ack each ``(job_id, attempts)`` claim still held; returns the acked ids."""
    return list(_run(conn, target, handle_sql.ack_held(), _claims(claims)).scalars())


def heartbeat_held(conn: Connection, *, target: Target, claims: list[tuple[int, int]]) -> list[int]:
    """Extend each claim still held by its job's visibility timeout; returns those ids."""
    return list(_run(conn, target, handle_sql.heartbeat_held(), _claims(claims)).scalars())


def ack_batch(conn: Connection, *, target: Target, job_ids: list[int]) -> int:
    params = {"p_queue": target.queue, "p_job_ids": job_ids}
    return len(_run(conn, target, queue_sql.ack_batch(), params).all())


def cancel(conn: Connection, *, target: Target, job_id: int) -> bool:
    params = {"p_queue": target.queue, "p_job_id": job_id}
    return _run(conn, target, queue_sql.cancel(), params).first() is not None


def get_job(conn: Connection, *, target: Target, job_id: int) -> Job | None:
    params = {"p_queue": target.queue, "p_job_id": job_id}
    row = _run(conn, target, queue_sql.get_job(), params).mappings().first()
    return None if row is None else Job.from_row(row)


def sweep(conn: Connection, *, target: Target, retention: timedelta | None) -> SweepResult:
    """SPEC Q12 + Q25, in one transaction when the connection is the store's own."""
    queue = {"p_queue": target.queue}
    _run(conn, target, queue_sql.bury_lapsed(), queue).all()
    expired = len(_run(conn, target, queue_sql.bury_expired(), queue).all())
    purged = 0
    if retention is not None:
        params = {**queue, "p_retention": retention}
        purged = len(_run(conn, target, queue_sql.purge_dead(), params).all())
    return SweepResult(expired=expired, purged=purged)
