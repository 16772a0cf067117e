"""The operator's operations on a queue and a store (O1-O6), over a sync ``Connection``.

Not on a worker's path.  The reads are planned for their values every time
(``custom_plan``, see ``execute.py``): a generic plan would scan the whole
table for any queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection

from .._values.job import Job, JobStatus, QueueStats, shown_row
from .address import QueueAddress, StoreAddress
from .execute import fetch
from .flow import limits_from
from .sql import queue_admin as queue_admin_sql
from .sql import queue_wide as queue_wide_sql
from .sql import stats as stats_sql


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
    due, scheduled, processing, lapsed, expired, dead, oldest, now, paused, completed = row[:10]
    age = 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
    return QueueStats(
        queue,
        due,
        scheduled,
        processing,
        lapsed,
        expired,
        dead,
        age,
        bool(paused),
        completed,
        limits_from(row[10:]),
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
