"""A queue's claim and a claim's operations (Q8-Q25), written once, over a sync ``Connection``.

The connection may be the store's own (autocommit), a ``Session``'s, or the
sync side of an ``AsyncSession``/``AsyncConnection`` reached through
``run_sync``; nothing here commits unless it owns the transaction.
Arguments arrive validated (see ``_calls``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Update

from .._values.job import Job, SweepResult, decode_claimed
from . import flow as _flow
from . import workflow as _workflow
from .execute import fetch
from .park import PARK_LIMIT, Parker
from .sql import claim as claim_sql
from .sql import handle as handle_sql
from .sql import queue_wide as queue_wide_sql
from .sql import throughput as throughput_sql

# What became of a claim given back at shutdown (Q27).
Released = Literal["released", "dead"]
Retried = Literal["retried", "dead"]

if TYPE_CHECKING:
    from .address import QueueAddress


def claim(
    conn: Connection,
    *,
    address: QueueAddress,
    worker_id: str,
    n: int,
    parker: Parker | None = None,
    max_bytes: int | None = None,
    flow: _flow.FlowState | None = None,
) -> list[Job]:
    """Q8-Q12; ``max_bytes``: the batch's payloads add up to at most that (but one
    job is always taken).  ``flow``: what the queue object knows of its limits
    (F1-F3; ``_db/flow.py``); a queue with limits is claimed in the limited form,
    under the same ``max_bytes`` rule."""
    if flow is not None and flow.limited:
        rows = _flow.claim_rows(
            conn, address=address, worker_id=worker_id, n=n, flow=flow, max_bytes=max_bytes
        )
        return _handed_out(conn, address, worker_id, rows)
    params: dict[str, Any] = {"p_queue": address.queue, "p_worker_id": worker_id, "p_n": n}
    if max_bytes is not None:
        params["p_max_bytes"] = max_bytes
    stmt = _claim_statement(conn, bounded=max_bytes is not None)
    if parker is not None and parker.take():
        # Before the claim, not after: a park that fails (a statement or lock
        # timeout, a cut connection) then raises with nothing claimed.  After
        # it, the claim would have committed and its jobs, never handed to
        # the caller, would sit processing until their claims lapsed.
        park(conn, address=address, parker=parker)
    rows = fetch(conn, address, stmt, params)
    if not rows and flow is not None and _flow.has_limits(conn, address):
        # To the unlimited claim a queue with limits looks paused (F1).
        flow.limited = True
        rows = _flow.claim_rows(
            conn, address=address, worker_id=worker_id, n=n, flow=flow, max_bytes=max_bytes
        )
    return _handed_out(conn, address, worker_id, rows)


def _handed_out(
    conn: Connection, address: QueueAddress, worker_id: str, rows: list[Any]
) -> list[Job]:
    # RETURNING jobs.*: the live columns in table order (pinned by a test).
    jobs, undecodable = decode_claimed(rows)
    for job_id, why in undecodable:
        # Dead at once, by id: a row no caller can be handed must not take
        # its batch down with it (the others run on this attempt) nor come
        # back at the next claim.
        bury = {"p_job_id": job_id, "p_worker_id": worker_id, "p_error": why}
        fetch(conn, address, handle_sql.bury_undecodable(), bury)
    # UPDATE ... RETURNING has no order; hand jobs out in claim order (Q9).
    jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
    return jobs


def park(conn: Connection, *, address: QueueAddress, parker: Parker) -> int:
    """Set aside up to ``PARK_LIMIT`` expired pending rows; how many were."""
    params = {"p_queue": address.queue, "p_limit": PARK_LIMIT}
    count = len(fetch(conn, address, claim_sql.park(), params))
    parker.parked(count)
    return count


def _claim_statement(conn: Connection, *, bounded: bool = False) -> Update:
    """The claim for this server (``_sql/claim.py``).

    From PostgreSQL 18 one ordered scan, which its B-tree skip scan makes a
    loose index scan; before, the explicit walk over priority levels.  The
    version is the one the dialect read when the engine first connected.
    """
    version = conn.dialect.server_version_info or (0,)
    if version >= claim_sql.SKIP_SCAN_SINCE:
        return claim_sql.claim_bounded() if bounded else claim_sql.claim()
    return claim_sql.claim_walk_bounded() if bounded else claim_sql.claim_walk()


def _held(job_id: int, attempts: int) -> dict[str, Any]:
    return {"p_job_id": job_id, "p_attempts": attempts}


def ack(conn: Connection, *, address: QueueAddress, job_id: int, attempts: int) -> bool:
    return bool(fetch(conn, address, handle_sql.ack(), _held(job_id, attempts)))


def ack_kept(
    conn: Connection, *, address: QueueAddress, job_id: int, attempts: int, result: bytes | None
) -> bool:
    """R1: the ack of a job stamped with keep_completed, keeping ``result``."""
    params = {
        **_held(job_id, attempts),
        "p_result": result,
        "p_done_channel": address.done_channel,
    }
    return bool(fetch(conn, address, handle_sql.ack_kept(), params))


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
    traceback: str | None = None,
) -> Retried | None:
    """``"retried"`` (pending again), ``"dead"`` (no attempt left), None (not held)."""
    params = {
        **_held(job_id, attempts),
        "p_delay": delay,
        "p_error": error,
        "p_traceback": traceback,
        "p_done_channel": address.done_channel,
    }
    rows = fetch(conn, address, handle_sql.retry(), params)
    return None if not rows else ("dead" if rows[0][1] == handle_sql.RETRIED_DEAD else "retried")


def snooze(
    conn: Connection, *, address: QueueAddress, job_id: int, attempts: int, delay: timedelta
) -> bool:
    """Z1: pending again after ``delay``, the attempt refunded; False when not held."""
    params = {**_held(job_id, attempts), "p_delay": delay}
    return bool(fetch(conn, address, handle_sql.snooze(), params))


def fail(
    conn: Connection,
    *,
    address: QueueAddress,
    job_id: int,
    attempts: int,
    error: str | None,
    traceback: str | None = None,
) -> bool:
    params = {
        **_held(job_id, attempts),
        "p_error": error,
        "p_traceback": traceback,
        "p_done_channel": address.done_channel,
    }
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


def gone(conn: Connection, *, address: QueueAddress, job_ids: list[int]) -> list[int]:
    """C1: those of ``job_ids`` with no row left anywhere (cancelled, Q23)."""
    params = {"p_job_ids": job_ids}
    there = {row[0] for row in fetch(conn, address, handle_sql.still_there(), params)}
    return [job_id for job_id in job_ids if job_id not in there]


def ack_batch(conn: Connection, *, address: QueueAddress, job_ids: list[int]) -> int:
    params = {
        "p_queue": address.queue,
        "p_job_ids": job_ids,
        "p_done_channel": address.done_channel,
    }
    # Two statements only when a row is kept (R1) or no longer held: the plain
    # DELETE first, so a batch of unkept jobs pays for no move (R1's "without the
    # stamp the ack is what it was"); the move finds the plain rows gone.
    acked = len(fetch(conn, address, queue_wide_sql.ack_batch_unkept(), params))
    if acked == len(job_ids):
        return acked
    return acked + len(fetch(conn, address, queue_wide_sql.ack_batch(), params))


def cancel(conn: Connection, *, address: QueueAddress, job_id: int) -> bool:
    params = {
        "p_queue": address.queue,
        "p_job_id": job_id,
        "p_control_channel": address.control_channel,
    }
    # Nothing cancelled: the id may be a waiting step promoted while the
    # statement waited for its workflow's lock (after its snapshot); a
    # second statement sees the promoted row.  G2, queue_wide.cancel.
    return bool(
        fetch(conn, address, queue_wide_sql.cancel(), params)
        or fetch(conn, address, queue_wide_sql.cancel(), params)
    )


def get_job(conn: Connection, *, address: QueueAddress, job_id: int) -> Job | None:
    params = {"p_queue": address.queue, "p_job_id": job_id}
    rows = fetch(conn, address, queue_wide_sql.get_job(), params)
    # The live columns then died_at (pinned by a test).
    # The read shape, then waiting_on (G1: a waiting step's upstreams not acked yet).
    return _workflow.with_waiting_on(rows[0]) if rows else None


def record_outcomes(
    conn: Connection, *, address: QueueAddress, acked: int, retried: int, dead: int
) -> None:
    """W2: add a worker's outcome tallies to this queue's current minute."""
    params = {"p_queue": address.queue, "p_acked": acked, "p_retried": retried, "p_dead": dead}
    conn.execute(throughput_sql.record(), params, execution_options=address.execution_options)


def check_schema(conn: Connection, *, address: QueueAddress) -> None:
    fetch(conn, address, queue_wide_sql.schema_probe(), {})


def sweep(conn: Connection, *, address: QueueAddress, retention: timedelta | None) -> SweepResult:
    """Q12 + Q25, in one transaction when the connection is the store's own."""
    queue = {"p_queue": address.queue}
    fetch(conn, address, queue_wide_sql.bury_lapsed(), queue)
    expired = len(fetch(conn, address, queue_wide_sql.bury_expired(), queue))
    purged = 0
    if retention is not None:
        params = {**queue, "p_retention": retention}
        purged = len(fetch(conn, address, queue_wide_sql.purge_dead(), params))
    completed = len(fetch(conn, address, queue_wide_sql.purge_completed(), queue))
    _workflow.sweep_finished(conn, address=address, queue=address.queue)  # G3
    return SweepResult(expired=expired, purged=purged, completed=completed)
