"""The registry of workers (V1) over a Connection: register, remove, list."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from .._values.workers import WorkerInfo
from .execute import fetch
from .sql import workers as workers_sql

if TYPE_CHECKING:
    from .address import StoreAddress

__all__ = ["list_workers", "register_worker", "remove_worker"]


def register_worker(
    conn: Connection,
    *,
    address: StoreAddress,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: list[str],
    concurrency: int,
    version: str,
) -> None:
    """Upsert this worker's row (last_seen: now) and prune the long-gone ones."""
    params = {
        "p_worker_id": worker_id,
        "p_hostname": hostname,
        "p_pid": pid,
        "p_queues": queues,
        "p_concurrency": concurrency,
        "p_version": version,
        "p_prune_after": workers_sql.PRUNE_AFTER,
    }
    fetch(conn, address, workers_sql.register(), params)


def remove_worker(conn: Connection, *, address: StoreAddress, worker_id: str) -> bool:
    """A graceful stop; False when the row was not there (pruned, or never written)."""
    return bool(fetch(conn, address, workers_sql.remove(), {"p_worker_id": worker_id}))


def list_workers(
    conn: Connection, *, address: StoreAddress, stale_after: timedelta = workers_sql.STALE_AFTER
) -> list[WorkerInfo]:
    params = {"p_stale_after": stale_after, "p_prune_after": workers_sql.PRUNE_AFTER}
    rows = fetch(conn, address, workers_sql.listing(), params, custom_plan=True)
    return [
        WorkerInfo(
            worker_id=r[0],
            hostname=r[1],
            pid=r[2],
            queues=tuple(r[3]),
            concurrency=r[4],
            started_at=r[5],
            last_seen=r[6],
            version=r[7],
            alive=bool(r[8]),
            in_flight=tuple(r[9] or ()),
        )
        for r in rows
    ]
