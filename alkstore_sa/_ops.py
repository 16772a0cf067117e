"""Each queue operation, written once, over a sync SQLAlchemy ``Connection``.

The connection may be the store's own (autocommit), a ``Session``'s, or the
sync side of an ``AsyncSession``/``AsyncConnection`` reached through
``run_sync``; nothing here commits unless it owns the transaction.
Arguments arrive validated (see ``_core``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection

from ._execute import fetch
from ._job import Job, SweepResult
from ._sql import claim as claim_sql
from ._sql import enqueue as enqueue_sql
from ._sql import handle as handle_sql
from ._sql import queue as queue_sql

# What became of a claim given back at shutdown (Q27).
Released = Literal["released", "dead"]

if TYPE_CHECKING:
    from ._core import QueueAddress, Stamps


def enqueue(
    conn: Connection, *, address: QueueAddress, payloads: list[bytes], stamps: Stamps
) -> list[int]:
    if not payloads:
        return []
    params = {
        "p_queue": address.queue,
        "p_priority": stamps.priority,
        "p_run_at": stamps.run_at,
        "p_delay": stamps.delay,
        "p_max_attempts": stamps.max_attempts,
        "p_visibility_timeout": stamps.visibility_timeout,
        "p_expires_in": stamps.expires_in,
        "p_channel": address.channel,
    }
    if len(payloads) == 1:
        params["p_payload"] = payloads[0]
        return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue_one(), params)]
    params["p_payloads"] = payloads
    return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue(), params)]


def claim(conn: Connection, *, address: QueueAddress, worker_id: str, n: int) -> list[Job]:
    params = {"p_queue": address.queue, "p_worker_id": worker_id, "p_n": n}
    # RETURNING jobs.*: the live columns in table order (pinned by a test).
    jobs = [Job.from_live(row) for row in fetch(conn, address, claim_sql.claim(), params)]
    # UPDATE ... RETURNING has no order; hand jobs out in claim order (Q9).
    jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
    return jobs


def _held(job_id: int, attempts: int) -> dict[str, Any]:
    return {"p_job_id": job_id, "p_attempts": attempts}


def ack(conn: Connection, *, address: QueueAddress, job_id: int, attempts: int) -> bool:
    return bool(fetch(conn, address, handle_sql.ack(), _held(job_id, attempts)))


def heartbeat(
    conn: Connection, *, address: QueueAddress, job_id: int, attempts: int, extend: timedelta
) -> bool:
    params = {**_held(job_id, attempts), "p_extend": extend}
    return bool(fetch(conn, address, handle_sql.heartbeat(), params))


def retry(
    conn: Connection,
    *,
    address: QueueAddress,
    job_id: int,
    attempts: int,
    delay: timedelta,
    error: str | None,
) -> bool:
    params = {**_held(job_id, attempts), "p_delay": delay, "p_error": error}
    return bool(fetch(conn, address, handle_sql.retry(), params))


def fail(
    conn: Connection, *, address: QueueAddress, job_id: int, attempts: int, error: str | None
) -> bool:
    params = {**_held(job_id, attempts), "p_error": error}
    return bool(fetch(conn, address, handle_sql.fail(), params))


def release(
    conn: Connection, *, address: QueueAddress, job_id: int, attempts: int
) -> Released | None:
    """``"released"`` (pending again), ``"dead"`` (it was the last attempt), None (not held)."""
    rows = fetch(conn, address, handle_sql.release(), _held(job_id, attempts))
    return None if not rows else ("dead" if rows[0][1] == handle_sql.RELEASED_DEAD else "released")


def _claims(claims: list[tuple[int, int]]) -> dict[str, Any]:
    return {"p_job_ids": [c[0] for c in claims], "p_attempts_list": [c[1] for c in claims]}


def ack_held(
    conn: Connection, *, address: QueueAddress, claims: list[tuple[int, int]]
) -> list[int]:
    """Ack each ``(job_id, attempts)`` claim still held; returns the acked ids."""
    return [row[0] for row in fetch(conn, address, handle_sql.ack_held(), _claims(claims))]


def heartbeat_held(
    conn: Connection, *, address: QueueAddress, claims: list[tuple[int, int]]
) -> list[int]:
    """Extend each claim still held by its job's visibility timeout; returns those ids."""
    return [row[0] for row in fetch(conn, address, handle_sql.heartbeat_held(), _claims(claims))]


def ack_batch(conn: Connection, *, address: QueueAddress, job_ids: list[int]) -> int:
    params = {"p_queue": address.queue, "p_job_ids": job_ids}
    return len(fetch(conn, address, queue_sql.ack_batch(), params))


def cancel(conn: Connection, *, address: QueueAddress, job_id: int) -> bool:
    params = {"p_queue": address.queue, "p_job_id": job_id}
    return bool(fetch(conn, address, queue_sql.cancel(), params))


def get_job(conn: Connection, *, address: QueueAddress, job_id: int) -> Job | None:
    params = {"p_queue": address.queue, "p_job_id": job_id}
    rows = fetch(conn, address, queue_sql.get_job(), params)
    # The live columns then died_at (pinned by a test).
    return Job.from_live(rows[0][:-1], died_at=rows[0][-1]) if rows else None


def sweep(conn: Connection, *, address: QueueAddress, retention: timedelta | None) -> SweepResult:
    """Q12 + Q25, in one transaction when the connection is the store's own."""
    queue = {"p_queue": address.queue}
    fetch(conn, address, queue_sql.bury_lapsed(), queue)
    expired = len(fetch(conn, address, queue_sql.bury_expired(), queue))
    purged = 0
    if retention is not None:
        params = {**queue, "p_retention": retention}
        purged = len(fetch(conn, address, queue_sql.purge_dead(), params))
    return SweepResult(expired=expired, purged=purged)
