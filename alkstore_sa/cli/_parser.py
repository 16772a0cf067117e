"""The ``alkstore`` command line: the top-level parser and the operations commands.

Built from light modules only (``_args``, ``_errors``, the value layer), so
``alkstore --help`` imports no SQLAlchemy, Alembic or optional extra (V3);
``_parser_run`` adds the long-running commands.  ``alkstore_sa.cli`` runs
what was parsed.
"""

from __future__ import annotations

import argparse
from functools import partial

from .._values.job import JOB_STATUSES
from .._values.validate import DEFAULT_SCHEMA, MAX_LIST, MAX_REQUEUE
from . import _args as a
from ._errors import SCHEMA_VAR
from ._parser_run import add_run_commands

__all__ = ["build_parser"]


def _common() -> argparse.ArgumentParser:
    # The connection options work before or after the command name; SUPPRESS
    # keeps a subcommand's unset copy from overwriting the global one.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="postgresql://, postgresql+psycopg:// or postgresql+asyncpg:// URL, the "
        "application's own (default: $ALKSTORE_DATABASE_URL)",
    )
    common.add_argument(
        "--schema",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help=f"PostgreSQL schema of the store (default: ${SCHEMA_VAR}, else {DEFAULT_SCHEMA})",
    )
    return common


def _app_opt() -> argparse.ArgumentParser:
    # --app: the application's queue options and names (O8); per command, after its name.
    app_opt = argparse.ArgumentParser(add_help=False)
    app_opt.add_argument(
        "--app",
        metavar="MODULE:OBJ",
        help="the application's Worker (or a callable returning one): its queues' options "
        "apply, and a queue it does not declare gets a warning",
    )
    return app_opt


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    common = _common()
    parser = argparse.ArgumentParser(
        prog="alkstore",
        parents=[common],
        description="alkstore_sa: a PostgreSQL job queue for SQLAlchemy.",
        epilog="Start with `alkstore demo` (no database needed).",
    )
    parser.add_argument("--version", action="version", version=f"alkstore_sa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_operations(sub, common, _app_opt())
    add_run_commands(sub, common)
    return parser


def _add_operations(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    app_opt: argparse.ArgumentParser,
) -> None:
    sub.add_parser(
        "migrate",
        parents=[common],
        help="create or upgrade the store's tables (Alembic, to head)",
        description="Upgrade the package's schema to the newest revision. Safe to re-run.",
    )

    p = sub.add_parser(
        "enqueue",
        parents=[common, app_opt],
        help="add one job to a queue; prints its id",
        description="Add one job; prints its id. The payload is stored as bytes.",
    )
    p.add_argument("queue", metavar="QUEUE")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--payload", metavar="TEXT", help="payload text (stored as UTF-8)")
    source.add_argument(
        "--payload-file", metavar="PATH", help="read the payload bytes from PATH ('-': stdin)"
    )
    p.add_argument("--delay", type=a.seconds, metavar="SECONDS", help="run no sooner than this")
    p.add_argument("--priority", type=int, help="higher runs first (default: 0)")
    p.add_argument("--max-attempts", type=int, metavar="N", help="attempts before dead-letter")
    p.add_argument("--expires-in", type=a.seconds, metavar="SECONDS", help="expire if not done")

    p = sub.add_parser(
        "stats",
        parents=[common, app_opt],
        help="per-queue counts: due, scheduled, processing, lapsed, expired, dead, paused",
        description="Count each queue's jobs by state, from one snapshot per queue. Without "
        "QUEUE, every queue with rows in the schema (and, with --app, the application's).",
    )
    p.add_argument("queues", metavar="QUEUE", nargs="*")
    p.add_argument("--json", action="store_true", help="print one JSON object keyed by queue")
    p.add_argument(
        "--watch", type=a.interval, metavar="SECS", help="redraw every SECS seconds until Ctrl-C"
    )

    p = sub.add_parser(
        "jobs",
        parents=[common, app_opt],
        help="list a queue's jobs, live and dead, newest first",
        description="List QUEUE's jobs (pending, processing and dead), newest first by id. "
        "With --json a task envelope's payload is shown as its JSON, any other payload "
        "as base64.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--status", choices=JOB_STATUSES, help="only this status")
    p.add_argument(
        "--limit",
        type=a.at_most(MAX_LIST),
        default=100,
        metavar="N",
        help=f"at most N jobs, 1..{MAX_LIST} (100)",
    )
    p.add_argument(
        "--before", type=a.positive_int, metavar="ID", help="only ids below ID (the next page)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON list of jobs")

    p = sub.add_parser(
        "cancel",
        parents=[common, app_opt],
        help="cancel live jobs (pending or processing) by id; prints how many went",
        description="Cancel jobs of QUEUE by id (Q23): a pending or processing job is "
        "deleted (a handler already running it is not interrupted, and its ack is refused); "
        "a dead job or an id this queue has no live job for is skipped and reported.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="+", type=a.job_id, help="jobs to cancel")

    p = sub.add_parser(
        "requeue",
        parents=[common, app_opt],
        help="move dead jobs back to pending (same ids); prints how many moved",
        description="Move dead jobs of QUEUE back to pending, keeping their ids, payloads and "
        "errors, with attempts reset: the ids given, or with --all the oldest --limit ones.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="*", type=a.job_id, help="dead jobs to requeue")
    p.add_argument("--all", action="store_true", help="the queue's dead jobs, oldest first")
    p.add_argument(
        "--limit",
        type=a.at_most(MAX_REQUEUE),
        metavar="N",
        help=f"move at most N, 1..{MAX_REQUEUE} (default: 1000 with --all, else every ID)",
    )
    p.set_defaults(check=partial(a.check_requeue, p))

    p = sub.add_parser(
        "purge",
        parents=[common, app_opt],
        help="delete dead jobs; asks first before deleting all of them",
        description="Delete dead jobs of QUEUE: the ids given, every one (--all), or those "
        "dead longer than --older-than. Deleting all of them (no ids) asks for confirmation "
        "on a terminal and needs --yes otherwise.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="*", type=a.job_id, help="dead jobs to delete")
    p.add_argument("--all", action="store_true", help="every dead job of the queue")
    p.add_argument(
        "--older-than",
        type=a.age,
        metavar="SECS",
        help="only those that died more than SECS seconds ago",
    )
    p.add_argument("--yes", action="store_true", help="do not ask before deleting them all")
    p.set_defaults(check=partial(a.check_purge, p))

    for name, does in (
        ("pause", "stop claims on QUEUE until it is resumed (running jobs finish)"),
        ("resume", "let workers claim from QUEUE again, at once"),
    ):
        p = sub.add_parser(
            name,
            parents=[common, app_opt],
            help=does,
            description=f"{does[0].upper()}{does[1:]}. Prints whether this changed anything; "
            "exit status 0 either way.",
        )
        p.add_argument("queue", metavar="QUEUE")

    p = sub.add_parser(
        "limits",
        parents=[common, app_opt],
        help="show or change QUEUE's flow-control limits (F1)",
        description="With no flag, show QUEUE's limits and its slots in use. Each flag "
        "changes the limit it names and keeps the others; --clear removes them all.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--concurrency", type=a.positive_int, metavar="N", help="live claims at once")
    p.add_argument(
        "--group-concurrency", type=a.positive_int, metavar="N", help="live claims per group"
    )
    p.add_argument("--rate", type=a.rate, metavar="N/SECS", help="claims per SECS seconds")
    p.add_argument("--group-rate", type=a.rate, metavar="N/SECS", help="the same per group")
    p.add_argument("--clear", action="store_true", help="remove every limit")
    p.add_argument("--json", action="store_true", help="print the limits as one JSON object")

    p = sub.add_parser(
        "sweep",
        parents=[common, app_opt],
        help="dead-letter expired jobs; purge old dead rows",
        description="Move the expired jobs of each QUEUE (none: every queue with rows) to dead "
        "(last_error='expired'); with --retention, or the application's "
        "dead_letter_retention (--app), also delete dead rows older than that.",
    )
    p.add_argument("queues", metavar="QUEUE", nargs="*")
    p.add_argument(
        "--retention", type=a.seconds, metavar="SECONDS", help="purge dead rows older than this"
    )

    p = sub.add_parser(
        "workers",
        parents=[common],
        help="list the workers that run (or stopped answering) and what each holds",
        description="The registry of workers (V1): each running worker's id, host, pid, "
        "queues, concurrency, start and last sign of life, and its jobs in flight. A worker "
        "not seen for 60 s is shown as gone until it is pruned.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON list of workers")

    p = sub.add_parser(
        "workflow",
        parents=[common],
        help="show a workflow (G3): its counts, and each step's state and upstreams",
        description="A workflow's steps counted by state, then each step: id, queue, "
        "state (waiting, pending, processing, completed, dead, cancelled) and the ids it "
        "comes after.",
    )
    p.add_argument("id", metavar="ID", type=a.job_id, help="the workflow's id (WorkflowRun.id)")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser(
        "periodic",
        parents=[common],
        help="list the application's periodic schedules (P1) and their next times",
        description="List the periodic schedules --app declares, with the slot each last "
        "fired (from the database) and the next one, by the database's clock.",
    )
    p.add_argument(
        "--app",
        metavar="MODULE:OBJ",
        required=True,
        help="the application's Worker (its periodic=), a Periodic or a list of them",
    )
    p.add_argument("--json", action="store_true", help="print one JSON list")
