"""The registry of workers (V1): register (and prune), remove, list.

A worker upserts its row at start and every ``REFRESH_INTERVAL``; the same
statement deletes the rows of this schema not refreshed for
``PRUNE_AFTER`` (workers that died without a graceful stop), so the table
stays as small as the fleet.  The listing marks a row not seen for
``STALE_AFTER`` as gone and joins each worker's jobs in flight (its
``processing`` rows, read through the partial index of processing rows).
Times are the database's clock.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    Insert,
    Integer,
    Interval,
    Select,
    Text,
    bindparam,
    delete,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.dml import ReturningDelete

from ...schema import jobs, workers
from ._common import NOW, PROCESSING

__all__ = ["PRUNE_AFTER", "REFRESH_INTERVAL", "STALE_AFTER", "listing", "register", "remove"]

# How often a running worker refreshes its row (V1: at least every 10 s).
REFRESH_INTERVAL = 5.0
# Not seen for this long: shown as gone (killed, or cut off from the database).
STALE_AFTER = timedelta(seconds=60)
# ... and for this long: deleted by the next refresh of any worker on the schema.
PRUNE_AFTER = timedelta(minutes=15)


@cache
def register() -> Insert:
    """Upsert ``:p_worker_id``'s row, last_seen now; delete rows older than ``:p_prune_after``."""
    pruned = (
        delete(workers)
        .where(workers.c.last_seen < NOW - bindparam("p_prune_after", type_=Interval))
        .returning(workers.c.worker_id)
        .cte("pruned")
    )
    values: dict[str, Any] = {
        "worker_id": bindparam("p_worker_id", type_=Text),
        "hostname": bindparam("p_hostname", type_=Text),
        "pid": bindparam("p_pid", type_=Integer),
        "queues": bindparam("p_queues", type_=ARRAY(Text)),
        "concurrency": bindparam("p_concurrency", type_=Integer),
        "version": bindparam("p_version", type_=Text),
        "started_at": NOW,
        "last_seen": NOW,
    }
    upsert = pg_insert(workers).values(**values)
    changed = {name: upsert.excluded[name] for name in values if name != "started_at"}
    return (
        upsert.on_conflict_do_update(index_elements=[workers.c.worker_id], set_=changed)
        .returning(workers.c.worker_id)
        .add_cte(pruned)
    )


@cache
def remove() -> ReturningDelete[tuple[str]]:
    """A graceful stop: ``:p_worker_id``'s row goes."""
    return (
        delete(workers)
        .where(workers.c.worker_id == bindparam("p_worker_id", type_=Text))
        .returning(workers.c.worker_id)
    )


@cache
def listing() -> Select[Any]:
    """Every row not older than ``:p_prune_after``, oldest start first, with whether it
    was seen within ``:p_stale_after`` and the ids of its jobs in flight."""
    held = (
        select(
            jobs.c.worker_id,
            func.array_agg(aggregate_order_by(jobs.c.id, jobs.c.id)).label("ids"),
        )
        .where(jobs.c.status == PROCESSING)
        .group_by(jobs.c.worker_id)
        .subquery("held")
    )
    alive = workers.c.last_seen >= NOW - bindparam("p_stale_after", type_=Interval)
    return (
        select(
            workers.c.worker_id,
            workers.c.hostname,
            workers.c.pid,
            workers.c.queues,
            workers.c.concurrency,
            workers.c.started_at,
            workers.c.last_seen,
            workers.c.version,
            alive.label("alive"),
            held.c.ids,
        )
        .select_from(workers.outerjoin(held, held.c.worker_id == workers.c.worker_id))
        .where(workers.c.last_seen >= NOW - bindparam("p_prune_after", type_=Interval))
        .order_by(workers.c.started_at, workers.c.worker_id)
    )
