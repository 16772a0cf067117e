"""``alkstore periodic --app MODULE:OBJ``: the application's schedules and their next times (P1).

``--app`` names a Worker or AsyncWorker (its ``periodic=`` schedules), a
``Periodic``, a list of them, or a function returning any of these.  The
times come from the database: its clock for "now" and each schedule's last
fired slot, so what is printed is what the workers will do.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from .._db.address import StoreAddress
from .._db.execute import fetch
from .._db.sql import _common as common_sql
from .._db.sql import periodic as periodic_sql
from ..store import Store, run_call
from ..tasks._periodic import Periodic
from ..worker import AsyncWorker, Worker
from ._db import CliError, Database, export_to_environment, open_engine
from ._loader import call_factory, load_object

__all__ = ["cmd_periodic"]

WANTED = "a Worker or AsyncWorker with periodic=, a Periodic or a list of them"


def _schedules(spec: str) -> list[Periodic]:
    obj: Any = load_object(spec)
    if callable(obj) and not isinstance(obj, type | Worker | AsyncWorker | Periodic):
        obj = call_factory(spec, obj, WANTED, label="--app ")
    if isinstance(obj, Worker | AsyncWorker):
        return list(obj.periodic)
    if isinstance(obj, Periodic):
        return [obj]
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        items = list(obj)
        if all(isinstance(p, Periodic) for p in items):
            return items
    raise CliError(f"--app {spec!r} is a {type(obj).__name__}, not {WANTED}", code=2)


def _read(schema: str) -> Callable[[Connection], tuple[datetime, dict[str, datetime]]]:
    """Read the database's clock and every schedule's last fired slot."""
    address = StoreAddress(schema)

    def read(conn: Connection) -> tuple[datetime, dict[str, datetime]]:
        now = fetch(conn, address, common_sql.clock(), {})[0][0]
        rows = fetch(conn, address, periodic_sql.last_slots(), {})
        return now, {name: slot for name, slot in rows}

    return read


def _fmt(dt: datetime | None) -> str:
    return "-" if dt is None else dt.isoformat(timespec="seconds")


def cmd_periodic(args: argparse.Namespace, database: Database, schema: str) -> int:
    export_to_environment(database, schema)
    schedules = _schedules(args.app)
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        now, fired = run_call(store, _read(schema))
    rows: list[tuple[Periodic, datetime | None, datetime | None]] = []
    for p in schedules:
        try:
            upcoming: datetime | None = p.next_after(now)
        except ValueError:  # never matches again
            upcoming = None
        last = fired.get(p.name)
        rows.append((p, None if last is None else last.astimezone(p.tz), upcoming))
    if args.json:
        listing = [
            {"name": p.name, "cron": p.cron, "tz": str(p.tz), "target": p.target_name,
             "last_slot": _fmt(last), "next": _fmt(upcoming)}
            for p, last, upcoming in rows
        ]  # fmt: skip
        print(json.dumps(listing))
        return 0
    if not rows:
        print(f"{args.app} declares no periodic schedules")
        return 0
    header = ["name", "cron", "tz", "target", "last fired slot", "next"]
    table = [
        [p.name, p.cron, str(p.tz), p.target_name, _fmt(last), _fmt(upcoming)]
        for p, last, upcoming in rows
    ]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    for row in [header, *table]:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
