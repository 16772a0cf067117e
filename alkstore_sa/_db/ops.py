"""Each queue operation, written once, over a sync SQLAlchemy ``Connection``.

The connection may be the store's own (autocommit), a ``Session``'s, or the
sync side of an ``AsyncSession``/``AsyncConnection`` reached through
``run_sync``; nothing here commits unless it owns the transaction.
Arguments arrive validated (see ``_core``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Update

from .._values.errors import AlkstoreError
from .._values.job import Job, JobStatus, QueueStats, SweepResult, decode_claimed, shown_row
from .execute import fetch
from .park import PARK_LIMIT, Parker
from .sql import claim as claim_sql
from .sql import enqueue as enqueue_sql
from .sql import handle as handle_sql
from .sql import queue_admin as queue_admin_sql
from .sql import queue_wide as queue_wide_sql
from .sql import stats as stats_sql
from .sql import throughput as throughput_sql
from .sql import vacuum as vacuum_sql

# What became of a claim given back at shutdown (Q27).
Released = Literal["released", "dead"]
Retried = Literal["retried", "dead"]

if TYPE_CHECKING:
    from .._values.stamps import Stamps
    from .address import QueueAddress, StoreAddress


def enqueue(
    conn: Connection,
    *,
    address: QueueAddress,
    payloads: list[bytes],
    stamps: Stamps,
    trace_context: dict[str, str] | None = None,
) -> list[int]:
    """Insert ``payloads``; ``trace_context`` (B3), when given, is stored with each job."""
    if not payloads:
        return []
    params = _enqueue_params(address, stamps)
    if stamps.keep_completed is not None:  # R1: the kept variants, so no other changes
        params["p_keep_completed"] = stamps.keep_completed
        return _enqueue_kept(conn, address, params, payloads, None, trace_context)
    if trace_context:
        params["p_trace_context"] = trace_context
        if len(payloads) == 1:
            params["p_payload"] = payloads[0]
            stmt = enqueue_sql.enqueue_one_traced()
        else:
            params["p_payloads"] = payloads
            stmt = enqueue_sql.enqueue_traced()
        return [row[0] for row in fetch(conn, address, stmt, params)]
    if len(payloads) == 1:
        params["p_payload"] = payloads[0]
        return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue_one(), params)]
    params["p_payloads"] = payloads
    return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue(), params)]


def _enqueue_kept(
    conn: Connection,
    address: QueueAddress,
    params: dict[str, Any],
    payloads: list[bytes],
    keys: list[str | None] | None,
    trace_context: dict[str, str] | None,
) -> list[Any]:
    """R1: an enqueue stamped with keep_completed (plain: ids; keyed: (id, key) rows).

    ``params`` carries ``p_keep_completed`` (the caller's stamp)."""
    one = len(payloads) == 1
    if trace_context:
        params["p_trace_context"] = trace_context
    if one:
        params["p_payload"] = payloads[0]
    else:
        params["p_payloads"] = payloads
    if keys is not None:
        if one:
            params["p_unique_key"] = keys[0]
        else:
            params["p_unique_keys"] = keys
    stmt = enqueue_sql.enqueue_kept(one=one, keyed=keys is not None, traced=bool(trace_context))
    rows = fetch(conn, address, stmt, params)
    return rows if keys is not None else [row[0] for row in rows]


def _enqueue_params(address: QueueAddress, stamps: Stamps) -> dict[str, Any]:
    """What every enqueue statement binds besides its payloads (and keys)."""
    return {
        "p_queue": address.queue,
        "p_priority": stamps.priority,
        "p_run_at": stamps.run_at,
        "p_delay": stamps.delay,
        "p_max_attempts": stamps.max_attempts,
        "p_visibility_timeout": stamps.visibility_timeout,
        "p_expires_in": stamps.expires_in,
        "p_channel": address.channel,
    }


# U1: how many times a keyed enqueue inserts again a key whose live job
# finished between the insert that met it and the look-up for it.  Each
# round needs another job of that key to be made and finish inside that
# window, so a second round is rare and a fifth never happens in practice.
KEYED_ROUNDS = 5


def enqueue_keyed(
    conn: Connection,
    *,
    address: QueueAddress,
    payloads: list[bytes],
    keys: list[str | None],
    stamps: Stamps,
    trace_context: dict[str, str] | None = None,
) -> list[int]:
    """U1: insert ``payloads`` with ``keys`` (parallel; None for no key), skipping live keys.

    Repeats of a key collapse to their first payload; a key that is live
    (pending or processing) keeps its job, whose id is returned in its
    place.  The database decides which key is live: the insert goes
    ``ON CONFLICT DO NOTHING`` against the partial unique index, and only
    the keys it skipped are then looked up -- in a statement of its own, so
    a job another transaction committed while the insert waited for it is
    seen.  A key whose job finished between the two is free again: it is
    inserted in another round.  Ids come back in input order.
    """
    first: dict[str, int] = {}  # each key's first position
    for i, key in enumerate(keys):
        if key is not None and key not in first:
            first[key] = i
    if len(first) == len(keys):  # every payload keyed, no repeat (one enqueue())
        sending = list(range(len(keys)))
    else:
        sending = [i for i, key in enumerate(keys) if key is None or first[key] == i]
    params = _enqueue_params(address, stamps)
    if trace_context:
        params["p_trace_context"] = trace_context
    if stamps.keep_completed is not None:
        params["p_keep_completed"] = stamps.keep_completed
    keyed: dict[str, int] = {}
    keyless: list[int] = []  # the keyless payloads' ids, in input order (ids ascend with it)
    for _ in range(KEYED_ROUNDS):
        for id_, key in _insert_keyed(conn, address, params, payloads, keys, sending):
            if key is None:
                keyless.append(id_)
            else:
                keyed[key] = id_
        skipped = [k for i in sending if (k := keys[i]) is not None and k not in keyed]
        if not skipped:
            break
        found = {"p_queue": address.queue, "p_unique_keys": skipped}
        for key, id_ in fetch(conn, address, enqueue_sql.live_keys(), found):
            keyed[key] = id_
        # Keyless payloads never collide: they all went in with the first round.
        sending = [first[key] for key in skipped if key not in keyed]
        if not sending:
            break
    else:
        raise AlkstoreError(
            f"queue {address.queue!r}: the jobs of unique key(s) "
            f"{sorted(k for k in first if k not in keyed)!r} kept finishing while "
            f"they were enqueued ({KEYED_ROUNDS} rounds); try again"
        )
    rest = iter(keyless)
    return [next(rest) if key is None else keyed[key] for key in keys]


def _insert_keyed(
    conn: Connection,
    address: QueueAddress,
    params: dict[str, Any],
    payloads: list[bytes],
    keys: list[str | None],
    sending: list[int],
) -> list[Any]:
    traced = "p_trace_context" in params
    if params.get("p_keep_completed") is not None:
        picked = [payloads[i] for i in sending]
        return _enqueue_kept(
            conn, address, params, picked, [keys[i] for i in sending], params.get("p_trace_context")
        )
    if len(sending) == 1:
        [i] = sending
        one = {**params, "p_payload": payloads[i], "p_unique_key": keys[i]}
        stmt = enqueue_sql.enqueue_one_keyed_traced() if traced else enqueue_sql.enqueue_one_keyed()
        return fetch(conn, address, stmt, one)
    many = {
        **params,
        "p_payloads": [payloads[i] for i in sending],
        "p_unique_keys": [keys[i] for i in sending],
    }
    stmt = enqueue_sql.enqueue_keyed_traced() if traced else enqueue_sql.enqueue_keyed()
    return fetch(conn, address, stmt, many)


def claim(
    conn: Connection,
    *,
    address: QueueAddress,
    worker_id: str,
    n: int,
    parker: Parker | None = None,
    max_bytes: int | None = None,
) -> list[Job]:
    """Q8-Q12; ``max_bytes``: the batch's payloads add up to at most that (but one
    job is always taken)."""
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
    # RETURNING jobs.*: the live columns in table order (pinned by a test).
    jobs, undecodable = decode_claimed(fetch(conn, address, stmt, params))
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


def ack_batch(conn: Connection, *, address: QueueAddress, job_ids: list[int]) -> int:
    params = {
        "p_queue": address.queue,
        "p_job_ids": job_ids,
        "p_done_channel": address.done_channel,
    }
    return len(fetch(conn, address, queue_wide_sql.ack_batch(), params))


def cancel(conn: Connection, *, address: QueueAddress, job_id: int) -> bool:
    params = {"p_queue": address.queue, "p_job_id": job_id}
    return bool(fetch(conn, address, queue_wide_sql.cancel(), params))


def get_job(conn: Connection, *, address: QueueAddress, job_id: int) -> Job | None:
    params = {"p_queue": address.queue, "p_job_id": job_id}
    rows = fetch(conn, address, queue_wide_sql.get_job(), params)
    # The live columns then died_at (pinned by a test).
    return shown_row(rows[0]) if rows else None


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
    return SweepResult(expired=expired, purged=purged, completed=completed)


# -- the queue as a whole (O1-O6) ------------------------------------------------


# The reads below are planned for their values every time (``custom_plan``):
# see _execute.py -- a generic plan would scan the whole table for any queue.


def list_jobs(
    conn: Connection,
    *,
    address: QueueAddress,
    status: JobStatus | None,
    limit: int,
    before: int | None,
) -> list[Job]:
    """O1: newest first by id; live and dead rows in ``get_job``'s row shape."""
    params = {"p_queue": address.queue, "p_status": status, "p_limit": limit, "p_before": before}
    rows = fetch(conn, address, queue_admin_sql.list_jobs(), params, custom_plan=True)
    return [shown_row(row) for row in rows]


def requeue_dead(
    conn: Connection, *, address: QueueAddress, job_ids: list[int] | None, limit: int
) -> int:
    """O2: one statement (so one transaction on the store's own connection), one wake."""
    params: dict[str, Any] = {
        "p_queue": address.queue,
        "p_limit": limit,
        "p_channel": address.channel,
    }
    if job_ids is None:
        stmt = queue_admin_sql.requeue_dead_oldest()
    else:
        stmt = queue_admin_sql.requeue_dead_ids()
        params["p_job_ids"] = job_ids
    [(moved, _woke)] = fetch(conn, address, stmt, params)
    return int(moved)


def purge_dead(
    conn: Connection,
    *,
    address: QueueAddress,
    job_ids: list[int] | None,
    older_than: timedelta | None,
) -> int:
    """O3: the given dead rows (or all), narrowed to those dead longer than ``older_than``."""
    queue = {"p_queue": address.queue}
    if job_ids is not None:
        params = {**queue, "p_job_ids": job_ids, "p_older_than": older_than}
        [(count,)] = fetch(conn, address, queue_admin_sql.purge_dead_ids(), params)
        return int(count)
    if older_than is not None:  # the retention purge of sweep_expired (Q25), as it is
        params = {**queue, "p_retention": older_than}
        return len(fetch(conn, address, queue_wide_sql.purge_dead(), params))
    [(count,)] = fetch(conn, address, queue_admin_sql.purge_dead_all(), queue)
    return int(count)


def pause(conn: Connection, *, address: QueueAddress) -> bool:
    """O4: True when this call paused the queue (False: it already was)."""
    return bool(fetch(conn, address, queue_admin_sql.pause(), {"p_queue": address.queue}))


def resume(conn: Connection, *, address: QueueAddress) -> bool:
    """O4: True when this call lifted a pause (and woke the queue's workers)."""
    params = {"p_queue": address.queue, "p_channel": address.channel}
    [(removed,)] = fetch(conn, address, queue_admin_sql.resume(), params)
    return bool(removed)


def _stats(queue: str, row: Sequence[Any]) -> QueueStats:
    # stats_sql.STATS_COLUMNS, in that order.
    due, scheduled, processing, lapsed, expired, dead, oldest, now, paused, completed = row
    age = 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
    return QueueStats(
        queue, due, scheduled, processing, lapsed, expired, dead, age, bool(paused), completed
    )


def stats(conn: Connection, *, address: QueueAddress) -> QueueStats:
    """O5: one statement, so one snapshot."""
    [row] = fetch(conn, address, stats_sql.stats(), {"p_queue": address.queue}, custom_plan=True)
    return _stats(address.queue, row)


def queue_names(conn: Connection, *, address: StoreAddress) -> list[str]:
    """O6: sorted in Python's order (code points), whatever the database's collation."""
    return sorted(
        row[0] for row in fetch(conn, address, stats_sql.queue_names(), {}, custom_plan=True)
    )


def store_stats(
    conn: Connection, *, address: StoreAddress, recent: bool = False
) -> dict[str, QueueStats]:
    """O6: every queue's stats from one statement (one snapshot for all), by sorted name.

    ``recent``: also the queues with throughput in the last hour (V2, the dashboard).
    """
    stmt = stats_sql.stats_listed() if recent else stats_sql.stats_all()
    rows = fetch(conn, address, stmt, {}, custom_plan=True)
    return {row[0]: _stats(row[0], row[1:]) for row in sorted(rows, key=lambda r: r[0])}


# The worker's vacuum: what one look at the jobs table did.
Vacuumed = Literal["vacuumed", "not needed", "busy", "not permitted"]
# An advisory-lock class of this package's own (the first key of the pair).
VACUUM_LOCK_CLASS = 0x616C6B  # "alk"


def vacuum_jobs(
    conn: Connection, *, address: StoreAddress, min_dead: int, live_fraction: float
) -> Vacuumed:
    """VACUUM the jobs table if it holds ``min_dead + live_fraction * live`` dead versions.

    Runs on an autocommit connection (VACUUM cannot run in a transaction).
    One worker at a time per table (an advisory lock; the others answer
    ``busy``); a role that may not vacuum it answers ``not permitted``.
    """
    table = vacuum_sql.jobs_table(conn.dialect, address.schema)
    params = {"p_table": table, "p_lock_class": VACUUM_LOCK_CLASS}
    row = conn.execute(vacuum_sql.churn(), params).first()
    if row is None:
        return "not needed"  # no statistics yet (a brand-new table)
    dead, live, permitted = row
    if not permitted:
        return "not permitted"
    if dead < min_dead + live_fraction * live:
        return "not needed"
    if not conn.execute(vacuum_sql.try_lock(), params).scalar():
        return "busy"
    try:
        conn.execute(vacuum_sql.vacuum(table))
    finally:
        _vacuum_unlock(conn, params)
    return "vacuumed"


def _vacuum_unlock(conn: Connection, params: dict[str, Any]) -> None:
    """Release the vacuum's lock; a connection that cannot is dropped, which ends
    its session and so the lock (it must not go back to the pool holding it)."""
    if conn.invalidated:  # e.g. the VACUUM was cancelled: the session is gone
        return
    try:
        conn.execute(vacuum_sql.unlock(), params)
    except Exception:
        conn.invalidate()
