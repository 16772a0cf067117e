"""``alkstore workers``: ``store.workers()`` (V1) as a table or as JSON."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from .._values.workers import WorkerInfo
from ..store import Store
from ._db import Database, open_engine

__all__ = ["cmd_workers", "worker_json"]

# In the table, at most this many ids of a worker's jobs in flight (then "...").
SHOWN_IDS = 10


def worker_json(info: WorkerInfo) -> dict[str, object]:
    return {
        "worker_id": info.worker_id,
        "hostname": info.hostname,
        "pid": info.pid,
        "queues": list(info.queues),
        "concurrency": info.concurrency,
        "started_at": info.started_at.isoformat(),
        "last_seen": info.last_seen.isoformat(),
        "version": info.version,
        "alive": info.alive,
        "in_flight": list(info.in_flight),
    }


def _ago(then: datetime, now: datetime) -> str:
    seconds = max((now - then).total_seconds(), 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    return f"{seconds / 60:.0f}m ago"


def _table(found: list[WorkerInfo]) -> str:
    now = max(w.last_seen for w in found)  # the database's clock, near enough
    header = ["worker", "host", "pid", "state", "queues", "conc", "in flight", "last seen"]
    rows = []
    for w in found:
        ids = ", ".join(map(str, w.in_flight[:SHOWN_IDS]))
        if len(w.in_flight) > SHOWN_IDS:
            ids += ", ..."
        flight = f"{len(w.in_flight)}" + (f" ({ids})" if ids else "")
        rows.append(
            [
                w.worker_id,
                w.hostname,
                str(w.pid),
                "running" if w.alive else "gone",
                ",".join(w.queues),
                str(w.concurrency),
                flight,
                _ago(w.last_seen, now),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def cmd_workers(args: argparse.Namespace, database: Database, schema: str) -> int:
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        found = store.workers()
    if args.json:
        print(json.dumps([worker_json(w) for w in found]))
    elif not found:
        print(f"no workers registered in schema {schema!r}")
    else:
        print(_table(found))
    return 0
