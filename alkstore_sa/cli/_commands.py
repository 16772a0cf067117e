"""The short commands: migrate, enqueue, jobs, sweep."""

from __future__ import annotations

import argparse
import json
import sys

from sqlalchemy import Connection, Text, func, literal, select, union

from .. import _validate
from .._opts import EnqueueOpts, QueueOpts
from ..schema import DEFAULT_SCHEMA, dead_jobs, jobs
from ..store import Store
from ._db import CliError, Database, open_engine
from ._migrate import migrate

__all__ = ["cmd_enqueue", "cmd_jobs", "cmd_migrate", "cmd_sweep", "queue_counts"]

STATUSES = ("pending", "processing", "dead")


def _queue_name(name: str) -> str:
    try:
        return _validate.queue_name(name)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None


def cmd_migrate(args: argparse.Namespace, database: Database, schema: str) -> int:
    with open_engine(database) as engine:
        before, after = migrate(engine, schema)
    now = ", ".join(after) or "none"
    if before == after:
        print(f"schema {schema!r} already at head ({now})")
    else:
        print(f"schema {schema!r} migrated: {', '.join(before) or 'empty'} -> {now}")
    return 0


def _payload(args: argparse.Namespace) -> bytes:
    if args.payload is not None:
        return str(args.payload).encode("utf-8")
    path = str(args.payload_file)
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise CliError(f"cannot read --payload-file {path!r}: {exc.strerror}", code=2) from None


def cmd_enqueue(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = _queue_name(args.queue)
    payload = _payload(args)
    try:
        opts = EnqueueOpts(
            priority=args.priority,
            delay=args.delay,
            expires_in=args.expires_in,
            max_attempts=args.max_attempts,
        )
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc), code=2) from None
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        job_id = store.queue(name).enqueue(payload, opts)
    print(job_id)
    return 0


def queue_counts(conn: Connection, queue: str | None) -> dict[str, dict[str, int]]:
    """{queue: {status: n}} from both tables, one round trip."""
    live = select(jobs.c.queue, jobs.c.status, func.count().label("n")).group_by(
        jobs.c.queue, jobs.c.status
    )
    dead = select(
        dead_jobs.c.queue,
        literal("dead", Text).label("status"),
        func.count().label("n"),
    ).group_by(dead_jobs.c.queue)
    if queue is not None:
        live = live.where(jobs.c.queue == queue)
        dead = dead.where(dead_jobs.c.queue == queue)
    counts: dict[str, dict[str, int]] = {}
    if queue is not None:
        counts[queue] = dict.fromkeys(STATUSES, 0)
    for row in conn.execute(union(live, dead)):
        counts.setdefault(row.queue, dict.fromkeys(STATUSES, 0))[row.status] = row.n
    return dict(sorted(counts.items()))


def cmd_jobs(args: argparse.Namespace, database: Database, schema: str) -> int:
    from .._connect import schema_errors

    queue = None if args.queue is None else _queue_name(args.queue)
    with open_engine(database) as engine, engine.connect() as conn, schema_errors(schema):
        mapped = conn.execution_options(schema_translate_map={DEFAULT_SCHEMA: schema})
        counts = queue_counts(mapped, queue)
    if args.json:
        print(json.dumps(counts[queue] if queue is not None else counts, sort_keys=True))
        return 0
    if not counts:
        print(f"no jobs in schema {schema!r}")
        return 0
    width = max(5, *(len(q) for q in counts))
    print(f"{'queue':<{width}}  " + "  ".join(f"{s:>10}" for s in STATUSES))
    for q, by_status in counts.items():
        print(f"{q:<{width}}  " + "  ".join(f"{by_status[s]:>10}" for s in STATUSES))
    return 0


def cmd_sweep(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = _queue_name(args.queue)
    try:
        opts = QueueOpts(dead_letter_retention=args.retention)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc), code=2) from None
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        result = store.queue(name, opts).sweep_expired()
    print(f"expired {result.expired}, purged {result.purged}")
    return 0
