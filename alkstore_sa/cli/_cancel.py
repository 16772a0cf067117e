"""``alkstore cancel QUEUE ID...``: ``queue.cancel(job_id)`` (Q23) for each id given."""

from __future__ import annotations

import argparse

from ..store import Store
from ._app import load_app, opts_for, warn_undeclared
from ._commands import queue_name
from ._db import Database, open_engine

__all__ = ["cmd_cancel"]


def _jobs(n: int) -> str:
    return f"{n} job{'' if n == 1 else 's'}"


def cmd_cancel(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = queue_name(args.queue)
    ids = list(dict.fromkeys(args.ids))
    app = None if args.app is None else load_app(args.app, database, schema)
    warn_undeclared(app, [name])
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        queue = store.queue(name, opts_for(app, name))
        skipped = [job_id for job_id in ids if not queue.cancel(job_id)]
    done = len(ids) - len(skipped)
    line = f"{name}: cancelled {_jobs(done)}"
    if skipped:
        listed = ", ".join(map(str, skipped[:20])) + (", ..." if len(skipped) > 20 else "")
        line += f"; skipped {len(skipped)} (no live job of this queue: {listed})"
    print(line)
    return 0
