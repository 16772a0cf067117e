"""``alkstore metrics`` and the HTTP side of ``alkstore worker`` (B4, B5).

``alkstore metrics --port N`` serves the queue gauges (``StoreCollector``)
until SIGTERM/SIGINT.  ``alkstore worker --metrics-port N`` serves the
worker's own counters and histograms (``prometheus.instrument()``) and the
queue gauges from the worker process; ``--health-port N`` serves
``/healthz`` (stdlib only: no extra needed).
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType, ModuleType
from typing import Any

from .._extras.health import HealthServer
from ..store import Store
from ..worker import AsyncWorker, Worker
from ._db import CliError, Database, open_engine

__all__ = [
    "announce",
    "check_worker_ports",
    "cmd_metrics",
    "health_server",
    "metrics_server",
    "require_prometheus",
    "serve_worker_http",
]

EXTRA_HINT = "install alkstore-sa[prometheus] (pip install 'alkstore-sa[prometheus]')"


def require_prometheus(option: str) -> ModuleType:
    """``alkstore_sa.prometheus``, or one line saying which extra to install."""
    try:
        from .. import prometheus
    except ImportError:
        raise CliError(f"{option} needs prometheus_client: {EXTRA_HINT}", code=2) from None
    return prometheus


def _url(host: str, port: int, path: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def _cannot_listen(what: str, host: str, port: int, exc: OSError) -> CliError:
    why = exc.strerror or str(exc)
    return CliError(f"cannot serve {what} on {host}:{port}: {why}", code=1)


@contextmanager
def metrics_server(registry: Any, host: str, port: int, what: str) -> Iterator[str]:
    """``registry`` over HTTP on ``host:port`` (prometheus_client's server); yields its URL."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise _cannot_listen(what, host, port, exc) from None
    try:
        yield _url(host, server.server_port, "/metrics")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def health_server(
    read: Callable[[], Any], host: str, port: int, respond: Callable[[Any], Any] | None = None
) -> HealthServer:
    try:
        if respond is None:
            return HealthServer(read, host, port)
        return HealthServer(read, host, port, respond)
    except OSError as exc:
        raise _cannot_listen("/healthz", host, port, exc) from None


def announce(what: str, url: str) -> None:
    print(f"serving {what} at {url}", flush=True)


def _wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (then return, for a clean exit 0)."""
    # A list, not an Event: the handler runs on this thread between any two
    # bytecodes, maybe inside Event.wait() holding the lock Event.set() takes.
    signalled: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        signalled.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not signalled:
            time.sleep(0.2)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def cmd_metrics(args: argparse.Namespace, database: Database, schema: str) -> int:
    prom = require_prometheus("alkstore metrics")
    from ..prometheus._asgi import served_registry

    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        store.queue_names()  # fail fast, in one line, on a schema never migrated
        collector = prom.StoreCollector(store, cache_seconds=args.cache_seconds)
        registry = served_registry(None, collector)
        with metrics_server(registry, args.host, args.port, "metrics") as url:
            announce("alkstore queue metrics", url)
            _wait_for_signal()
    return 0


@contextmanager
def serve_worker_http(
    args: argparse.Namespace, database: Database, schema: str, worker: Worker | AsyncWorker
) -> Iterator[None]:
    """``--metrics-port`` and ``--health-port`` of ``alkstore worker``, for the run's length."""
    with ExitStack() as stack:
        if args.metrics_port is not None:
            prom = require_prometheus("--metrics-port")
            from prometheus_client import REGISTRY

            from ..prometheus._asgi import served_registry

            prom.instrument(REGISTRY)  # before run(): a run reads the observers when it starts
            collector = None
            if not args.no_queue_gauges:
                engine = database.engine()
                stack.callback(engine.dispose)
                store = stack.enter_context(Store(engine, schema=schema))
                collector = prom.StoreCollector(store)
            registry = served_registry(REGISTRY, collector)
            url = stack.enter_context(
                metrics_server(registry, args.http_host, args.metrics_port, "metrics")
            )
            announce("worker metrics", url)
        if args.health_port is not None:
            health = stack.enter_context(
                health_server(worker.health, args.http_host, args.health_port)
            )
            announce("worker health", health.url)
        yield


def check_worker_ports(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (
        args.metrics_port is not None
        and args.metrics_port != 0
        and args.metrics_port == args.health_port
    ):
        parser.error("--metrics-port and --health-port must differ")
    if args.no_queue_gauges and args.metrics_port is None:
        parser.error("--no-queue-gauges goes with --metrics-port")
