"""The operations commands: stats, jobs, requeue, purge, pause, resume, sweep (O8).

Each is one call of the public API (``store.stats()``, ``queue.jobs()``,
``queue.requeue_dead()``, ...; O1-O6): this module validates, asks, prints
and loops, and has no SQL of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from .._values.job import QueueStats
from .._values.opts import QueueOpts
from .._values.text import printable
from .._values.validate import MAX_REQUEUE
from ..store import Store
from ._app import App, load_app, opts_for, warn_undeclared
from ._commands import queue_name
from ._db import CliError, Database, open_engine

__all__ = [
    "cmd_pause",
    "cmd_purge",
    "cmd_requeue",
    "cmd_resume",
    "cmd_stats",
    "cmd_sweep",
    "stats_json",
]

# QueueStats' fields after its queue name (O5), in order: what `stats --json` prints.
STATS_FIELDS = tuple(f.name for f in dataclasses.fields(QueueStats))[1:]

# Erase the screen and home the cursor: `--watch` on a terminal redraws in place.
_CLEAR = "\x1b[H\x1b[2J"


def _names(raw: Sequence[str]) -> list[str]:
    # Each name once, in the order given.
    return list(dict.fromkeys(queue_name(n) for n in raw))


def _app(args: argparse.Namespace, database: Database, schema: str) -> App | None:
    return None if args.app is None else load_app(args.app, database, schema)


# --- stats ------------------------------------------------------------------------------


def stats_json(stats: Mapping[str, QueueStats]) -> dict[str, dict[str, object]]:
    """``{queue: {field: value}}`` with QueueStats' fields (O5); ``limits`` as an object
    (F1, None without limits) and ``slots_in_use`` (F2) after them."""
    from ._limits import limits_json

    def fields(s: QueueStats) -> dict[str, object]:
        found: dict[str, object] = {f: getattr(s, f) for f in STATS_FIELDS}
        found["limits"] = None if s.limits is None else limits_json(s.limits)
        found["slots_in_use"] = s.slots_in_use
        return found

    return {name: fields(s) for name, s in stats.items()}


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _stats_table(stats: Mapping[str, QueueStats], schema: str) -> str:
    if not stats:
        return f"no queues in schema {schema!r}"
    header = [
        "queue", "due", "scheduled", "processing", "lapsed", "expired", "dead", "oldest due",
        "paused",
    ]  # fmt: skip
    rows = []
    for name, s in stats.items():
        oldest = _age(s.oldest_due_age) if s.due else "-"
        counts = (s.due, s.scheduled, s.processing, s.lapsed, s.expired, s.dead)
        rows.append([printable(name), *map(str, counts), oldest, "yes" if s.paused else "no"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = (f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    return "\n".join(line(r) for r in [header, *rows])


def _watch(draw: Callable[[], str], interval: float, as_json: bool) -> int:
    """Print ``draw()`` every ``interval`` seconds until Ctrl-C, which ends it with status 0."""
    tty = sys.stdout.isatty() and not as_json
    try:
        while True:
            text = draw()
            if tty:
                stamp = datetime.now().astimezone().isoformat(timespec="seconds")
                head = f"every {interval:g}s, Ctrl-C to stop   {stamp}\n\n"
                sys.stdout.write(_CLEAR + head + text + "\n")
            else:
                # A pipe or a log: one document (or table, then a blank line) per round.
                sys.stdout.write(text + ("\n" if as_json else "\n\n"))
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def cmd_stats(args: argparse.Namespace, database: Database, schema: str) -> int:
    named = _names(args.queues)
    app = _app(args, database, schema)
    warn_undeclared(app, named)
    with open_engine(database) as engine, Store(engine, schema=schema) as store:

        def read() -> dict[str, QueueStats]:
            if named:  # each queue's own snapshot (O5)
                return {name: store.queue(name).stats() for name in named}
            found = store.stats()  # every queue with a row or a pause, one snapshot (O6)
            if app is not None:  # and the application's, even before they have rows
                for name in app.queues.keys() - found.keys():
                    found[name] = store.queue(name).stats()
            return dict(sorted(found.items()))

        def draw() -> str:
            stats = read()
            if args.json:
                return json.dumps(stats_json(stats))
            return _stats_table(stats, schema)

        if args.watch is not None:
            return _watch(draw, args.watch, args.json)
        print(draw())
    return 0


# --- requeue, purge, pause, resume (O2-O4) -----------------------------------------------

# `requeue --all` moves at most this many unless --limit says otherwise (the library's default).
REQUEUE_ALL_LIMIT = 1000


def _dead_jobs(n: int) -> str:
    return f"{n} dead job{'' if n == 1 else 's'}"


def _skipped(done: int, given: int, also: str = "") -> str:
    """What became of ids that were given but not acted on: skipped, and why."""
    if done >= given:
        return ""
    left = given - done
    if done == 0:
        which = "the id given was" if given == 1 else f"all {given} ids given were"
    else:
        which = f"{left} of the {given} ids given {'was' if left == 1 else 'were'}"
    return f"; {which} skipped (not a dead job of this queue{also})"


def cmd_requeue(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = queue_name(args.queue)
    ids = list(dict.fromkeys(args.ids))
    app = _app(args, database, schema)
    warn_undeclared(app, [name])
    if args.all:
        limit = args.limit or REQUEUE_ALL_LIMIT
    else:  # every id given, unless --limit says fewer
        limit = args.limit or min(len(ids), MAX_REQUEUE)
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        moved = store.queue(name, opts_for(app, name)).requeue_dead(ids or None, limit=limit)
    if args.all:
        more = f" (--limit {limit} reached: more may be left, run it again)"
        print(f"{name}: requeued {_dead_jobs(moved)}{more if moved == limit else ''}")
    else:
        also = ", or past --limit" if limit < len(ids) else ""
        print(f"{name}: requeued {_dead_jobs(moved)}{_skipped(moved, len(ids), also)}")
    return 0


def _confirm(question: str) -> bool:
    """Ask on the terminal (the question on stderr, so stdout stays the command's output)."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_purge(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = queue_name(args.queue)
    ids = list(dict.fromkeys(args.ids))
    age = args.older_than
    app = _app(args, database, schema)
    warn_undeclared(app, [name])
    older = "" if age is None else f" that died more than {age:g} s ago"
    asks = not ids and not args.yes  # no ids: every dead job of the queue (that old)
    if asks and not sys.stdin.isatty():
        raise CliError(
            f"not purging: this deletes every dead job of queue {name!r}{older}; "
            "pass --yes to confirm (stdin is not a terminal to ask on)",
            code=2,
        )
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        queue = store.queue(name, opts_for(app, name))
        if asks:
            dead = queue.stats().dead
            if age is None:
                question = f"Delete all {_dead_jobs(dead)} of queue {name!r}?"
            else:
                question = f"Delete the dead jobs of queue {name!r}{older} (of {dead} now)?"
            if not _confirm(question):
                print("alkstore: nothing purged", file=sys.stderr)
                return 1
        purged = queue.purge_dead(ids or None, older_than=age)
    also = "" if age is None else f", or died {age:g} s ago or less"
    print(f"{name}: purged {_dead_jobs(purged)}{_skipped(purged, len(ids), also) if ids else ''}")
    return 0


def cmd_pause(args: argparse.Namespace, database: Database, schema: str) -> int:
    return _set_paused(args, database, schema, paused=True)


def cmd_resume(args: argparse.Namespace, database: Database, schema: str) -> int:
    return _set_paused(args, database, schema, paused=False)


def _set_paused(args: argparse.Namespace, database: Database, schema: str, *, paused: bool) -> int:
    name = queue_name(args.queue)
    warn_undeclared(_app(args, database, schema), [name])
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        queue = store.queue(name)
        changed = queue.pause() if paused else queue.resume()
    if paused:
        print(f"{name}: paused" if changed else f"{name}: already paused")
    else:
        print(f"{name}: resumed" if changed else f"{name}: was not paused")
    return 0


# --- sweep ------------------------------------------------------------------------------


def _sweep_opts(app: App | None, name: str, retention: float | None) -> QueueOpts:
    opts = opts_for(app, name) or QueueOpts()
    if retention is None:
        return opts
    try:
        return dataclasses.replace(opts, dead_letter_retention=retention)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc), code=2) from None


def cmd_sweep(args: argparse.Namespace, database: Database, schema: str) -> int:
    named = _names(args.queues)
    _sweep_opts(None, "", args.retention)  # a bad --retention is a usage error, before any SQL
    app = _app(args, database, schema)
    warn_undeclared(app, named, uses_opts=True)
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        # None named: every queue with rows (or a pause), and the application's (as `stats`).
        names = named or sorted({*store.queue_names(), *(app.queues if app else ())})
        if not names:
            print(f"no queues in schema {schema!r}")
        for name in names:
            result = store.queue(name, _sweep_opts(app, name, args.retention)).sweep_expired()
            print(f"{name}: expired {result.expired}, purged {result.purged}")
    return 0
