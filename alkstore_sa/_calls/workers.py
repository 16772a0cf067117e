"""The registry of workers (V1) as calls of one connection, for both faces.

``store.workers()`` reads; a running Worker registers, refreshes and
removes itself through ``register``/``remove`` (``worker/_registry.py``).
"""

from __future__ import annotations

from functools import partial

from .._db import workers as _ops
from .._db.address import StoreAddress
from .._values import validate as v
from .._values.workers import WorkerInfo
from . import Call

__all__ = ["listing", "register", "remove"]


def listing(schema: str) -> Call[list[WorkerInfo]]:
    """V1: every registered worker of the schema, the gone ones marked."""
    return partial(_ops.list_workers, address=StoreAddress(schema))


def register(
    schema: str,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: list[str],
    concurrency: int,
    version: str,
) -> Call[None]:
    """Upsert the worker's row (refreshing ``last_seen``); prune long-gone rows."""
    return partial(
        _ops.register_worker,
        address=StoreAddress(schema),
        worker_id=v.worker_id(worker_id),
        hostname=hostname,
        pid=pid,
        queues=queues,
        concurrency=concurrency,
        version=version,
    )


def remove(schema: str, worker_id: str) -> Call[bool]:
    """A graceful stop: the worker's row goes."""
    return partial(_ops.remove_worker, address=StoreAddress(schema), worker_id=worker_id)
