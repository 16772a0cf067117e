"""`alkstore limits QUEUE [--concurrency N] [--group-concurrency N] [--rate N/SECS]
[--group-rate N/SECS] [--clear] [--json]`: show or change a queue's limits (F1)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from .._values.limits import Limits, Rate
from .._values.text import printable
from ..store import Store
from ._app import load_app, warn_undeclared
from ._commands import queue_name
from ._db import CliError, Database, open_engine

__all__ = ["cmd_limits", "limits_json"]

_FLAGS = ("concurrency", "group_concurrency", "rate", "group_rate")


def limits_json(limits: Limits | None) -> dict[str, object]:
    def rate(r: Rate | None) -> dict[str, float] | None:
        return None if r is None else {"count": r.count, "per": r.per}

    found = limits or Limits()
    return {
        "concurrency": found.concurrency,
        "group_concurrency": found.group_concurrency,
        "rate": rate(found.rate),
        "group_rate": rate(found.group_rate),
    }


def _shown(limits: Limits | None) -> str:
    if limits is None:
        return "no limits"
    parts = []
    for name in _FLAGS:
        value = getattr(limits, name)
        if value is not None:
            parts.append(f"{name}={value}")
    return " ".join(parts)


def cmd_limits(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = queue_name(args.queue)
    changes = {k: getattr(args, k) for k in _FLAGS if getattr(args, k) is not None}
    if args.clear and changes:
        raise CliError("--clear removes every limit: give it alone", code=2)
    app = None if args.app is None else load_app(args.app, database, schema)
    warn_undeclared(app, [name])
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        queue = store.queue(name)
        try:
            if args.clear:
                queue.set_limits(None)
            elif changes:
                for key in ("rate", "group_rate"):
                    if key in changes:
                        changes[key] = Rate(*changes[key])
                queue.set_limits(dataclasses.replace(queue.limits() or Limits(), **changes))
        except (ValueError, NotImplementedError) as exc:
            raise CliError(printable(str(exc)), code=2) from None
        stats = queue.stats()
    if args.json:
        shown = {"queue": name, **limits_json(stats.limits), "slots_in_use": stats.slots_in_use}
        print(json.dumps(shown))
    else:
        print(f"{printable(name)}: {_shown(stats.limits)} (slots in use: {stats.slots_in_use})")
    return 0
