"""The short commands: migrate, enqueue."""

from __future__ import annotations

import argparse
import sys

from .._extras.migrate import upgrade
from .._values import validate as _validate
from .._values.opts import EnqueueOpts
from ..store import Store
from ._app import load_app, opts_for, warn_undeclared
from ._db import CliError, Database, open_engine

__all__ = ["cmd_enqueue", "cmd_migrate", "queue_name"]


def queue_name(name: str) -> str:
    try:
        return _validate.queue_name(name)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None


def cmd_migrate(args: argparse.Namespace, database: Database, schema: str) -> int:
    with open_engine(database) as engine, engine.connect() as conn:
        before, after = upgrade(conn, schema)
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
    name = queue_name(args.queue)
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
    app = None if args.app is None else load_app(args.app, database, schema)
    warn_undeclared(app, [name], uses_opts=True)
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        job_id = store.queue(name, opts_for(app, name)).enqueue(payload, opts)
    print(job_id)
    return 0
