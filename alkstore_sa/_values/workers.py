"""``WorkerInfo``: one row of the registry of workers (V1), as ``store.workers()`` returns it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["WorkerInfo"]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker that registered itself in this store's schema.

    ``last_seen`` is the database's time of the worker's last refresh (at
    least every 10 s while it runs).  ``alive`` is False once it has not
    been seen for 60 s -- killed, or cut off from the database -- and the
    row is pruned some minutes later; a graceful stop removes it at once.
    ``in_flight`` holds the ids of the jobs it has claimed and not yet
    finished, in this schema (``processing`` rows with its ``worker_id``).
    """

    worker_id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: datetime
    last_seen: datetime
    version: str
    alive: bool = True
    in_flight: tuple[int, ...] = ()
