"""W2's throughput counts: a worker adds its outcome tallies to the current minute.

One statement per queue and flush (about once a second per worker, never
per job): an upsert on ``(queue, minute)`` that adds to the counters, and,
in the same statement, the deletion of this queue's rows older than
``KEEP``, so the table holds at most a couple of hours per queue.  Both go
through the primary key.  The minute is the database's clock.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from sqlalchemy import BigInteger, Insert, Text, bindparam, delete, func, literal
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...schema import throughput
from ._common import NOW

__all__ = ["KEEP", "record"]

# How long a minute's counts are kept (the dashboard shows the last hour).
KEEP = timedelta(hours=2)


@cache
def record() -> Insert:
    """Add ``:acked``, ``:retried``, ``:dead`` to ``:queue``'s current minute; prune old minutes."""
    queue = bindparam("p_queue", type_=Text)
    minute = func.date_trunc(literal("minute", type_=Text), NOW)
    pruned = (
        delete(throughput)
        .where(throughput.c.queue == queue, throughput.c.minute < NOW - literal(KEEP))
        .cte("pruned")
    )
    counts: dict[str, Any] = {
        name: bindparam(f"p_{name}", type_=BigInteger) for name in ("acked", "retried", "dead")
    }
    upsert = pg_insert(throughput).values(queue=queue, minute=minute, **counts)
    return upsert.on_conflict_do_update(
        index_elements=[throughput.c.queue, throughput.c.minute],
        set_={name: throughput.c[name] + upsert.excluded[name] for name in counts},
    ).add_cte(pruned)
