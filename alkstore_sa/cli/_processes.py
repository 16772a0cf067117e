"""``alkstore worker TARGET --processes N`` (X1): the CLI side of ``run_processes``.

Each child resolves ``TARGET`` itself (``child_worker``, imported by name
in the spawned process), so a bad target is the child's one-line error.
``--health-port`` answers for every child at once; ``--metrics-port``
serves the children's counters summed (each child reports its own over
the supervisor's pipe) with the queue gauges read once, here.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

from .._extras.health import health_response
from .._values.errors import WorkerStartError
from ..store import Store
from ..worker import AsyncWorker, ProcessesHealth, ProcessSupervisor, Worker
from ._db import CliError, Database
from ._metrics import announce, health_server, metrics_server, require_prometheus

__all__ = ["child_worker", "cmd_worker_processes", "processes_response"]

log = logging.getLogger("alkstore.cli")


def child_worker(
    spec: str, concurrency: int | None, log_level: str, handler_processes: int | None = None
) -> Worker | AsyncWorker:
    """What each child runs first: the CLI's logging, then the target resolved as
    ``alkstore worker`` resolves it (``--handler-processes``: a pool per child)."""
    from ._worker import resolve_worker, setup_logging

    setup_logging(log_level)
    return resolve_worker(spec, concurrency, handler_processes)


def processes_response(health: ProcessesHealth) -> tuple[int, dict[str, Any]]:
    """``/healthz`` of a supervisor: 200 while every child is healthy, each child listed."""
    children = []
    for child in health.children:
        body: dict[str, Any] = {
            "process": child.slot + 1,
            "pid": child.pid,
            "worker_id": child.worker_id,
            "alive": child.alive,
            "restarts": child.restarts,
            "reported_ago": None if child.reported_ago is None else round(child.reported_ago, 3),
        }
        if child.health is not None:
            body.update(health_response(child.health)[1])
        body["healthy"] = child.healthy
        children.append(body)
    doc = {
        "healthy": health.healthy,
        "running": health.running,
        "processes": health.processes,
        "children": children,
    }
    return (200 if health.healthy else 503), doc


def _sample_order(item: tuple[tuple[str, str, tuple[tuple[str, str], ...]], float]) -> Any:
    # Within a family: one label set at a time, a histogram's buckets by
    # their bound (as prometheus_client writes them), then _count, _sum.
    (family, sample, labels), _ = item
    others = tuple(pair for pair in labels if pair[0] != "le")
    le = dict(labels).get("le")
    bound = float(le) if le is not None else 0.0
    return (family, others, 0 if le is not None else 1, bound, sample)


class SummedCollector:
    """The children's worker metrics, summed over the live ones and the dead ones' last."""

    def __init__(self, supervisor: ProcessSupervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterable[Any]:
        from prometheus_client.metrics_core import GaugeMetricFamily, Metric

        totals, kinds = self.supervisor.samples()
        families: dict[str, Metric] = {}
        for (family, sample, labels), value in sorted(totals.items(), key=_sample_order):
            metric = families.get(family)
            if metric is None:
                typ, doc = kinds.get(family, ("unknown", ""))
                metric = families[family] = Metric(family, doc, typ)
            metric.add_sample(sample, dict(labels), value)
        yield from families.values()
        health = self.supervisor.health()
        yield GaugeMetricFamily(
            "alkstore_worker_processes",
            "Worker processes alive under this supervisor",
            value=sum(1 for c in health.children if c.alive),
        )
        yield GaugeMetricFamily(
            "alkstore_worker_process_restarts",
            "Worker processes restarted by this supervisor since it started",
            value=sum(c.restarts for c in health.children),
        )


@contextmanager
def _serve(
    args: argparse.Namespace, database: Database, schema: str, supervisor: ProcessSupervisor
) -> Iterator[None]:
    with ExitStack() as stack:
        if args.metrics_port is not None:
            prom = require_prometheus("--metrics-port")
            from ..prometheus._asgi import served_registry

            collector = None
            if not args.no_queue_gauges:
                engine = database.engine()
                stack.callback(engine.dispose)
                store = stack.enter_context(Store(engine, schema=schema))
                collector = prom.StoreCollector(store)
            registry = served_registry(SummedCollector(supervisor), collector)
            url = stack.enter_context(
                metrics_server(registry, args.http_host, args.metrics_port, "metrics")
            )
            announce("worker metrics", url)
        if args.health_port is not None:
            health = stack.enter_context(
                health_server(
                    supervisor.health, args.http_host, args.health_port, processes_response
                )
            )
            announce("worker health", health.url)
        yield


def cmd_worker_processes(args: argparse.Namespace, database: Database, schema: str) -> int:
    """After ``cmd_worker``'s checks: run ``args.processes`` children of the target."""
    target = partial(
        child_worker, args.target, args.concurrency, args.log_level, args.handler_processes
    )
    supervisor = ProcessSupervisor(target, args.processes, metrics=args.metrics_port is not None)
    with _serve(args, database, schema, supervisor):
        # Nothing logged before the children start: a bad target is one line.
        log.debug("running %s in %d processes", args.target, args.processes)
        try:
            supervisor.run()
        except WorkerStartError as exc:
            raise CliError(exc.message, code=exc.code) from None
    return 0
