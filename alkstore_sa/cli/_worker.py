"""``alkstore worker MODULE:OBJ``: run a Worker defined in the user's code."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
from typing import Any

from ..store import Store
from ..tasks import Tasks
from ..worker import AsyncWorker, Worker
from ..worker._worker import check_schema, override_concurrency, override_handler_executor
from ._db import CliError, Database, export_to_environment, open_engine
from ._loader import call_factory, load_object
from ._metrics import require_prometheus, serve_worker_http

__all__ = ["WANTED", "cmd_worker", "resolve_worker", "setup_logging"]

WANTED = "a Worker or AsyncWorker (for example myapp.tasks:worker) or a Tasks registry"

log = logging.getLogger("alkstore.cli")


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )


def _accepts_concurrency(factory: Any) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "concurrency" or p.kind is p.VAR_KEYWORD for p in params)


def _with_concurrency(worker: Worker | AsyncWorker, concurrency: int) -> None:
    # A built worker is rebuilt by the worker module itself; a factory taking
    # `concurrency=` avoids even that: it is called with the value.
    override_concurrency(worker, concurrency)


def _from_tasks(tasks: Tasks[Any], concurrency: int | None) -> Worker | AsyncWorker:
    """T2: a registry runs on a worker of its store's kind, with the default settings."""
    kwargs: dict[str, Any] = {} if concurrency is None else {"concurrency": concurrency}
    try:
        return AsyncWorker(tasks, **kwargs) if tasks.is_async else Worker(tasks, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CliError(f"cannot run the tasks: {exc}", code=2) from None


def resolve_worker(
    spec: str, concurrency: int | None, handler_processes: int | None = None
) -> Worker | AsyncWorker:
    worker = _resolve(spec, concurrency)
    if handler_processes is not None:  # X2: the handlers in N spawned processes
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        pool = ProcessPoolExecutor(handler_processes, mp_context=get_context("spawn"))
        try:
            override_handler_executor(worker, pool)
        except (TypeError, ValueError) as exc:
            pool.shutdown(wait=False)
            raise CliError(f"--handler-processes: {exc}", code=2) from None
    return worker


def _resolve(spec: str, concurrency: int | None) -> Worker | AsyncWorker:
    obj = load_object(spec)
    if isinstance(obj, Tasks):
        return _from_tasks(obj, concurrency)
    if not isinstance(obj, Worker | AsyncWorker):
        if not callable(obj) or isinstance(obj, type):
            raise CliError(
                f"{spec!r} is a {type(obj).__name__}, not a Worker, AsyncWorker, "
                "Tasks registry or a function returning one",
                code=2,
            )
        kwargs = {"concurrency": concurrency} if concurrency and _accepts_concurrency(obj) else {}
        made = call_factory(spec, obj, WANTED, kwargs=kwargs)
        if isinstance(made, Tasks):
            return _from_tasks(made, concurrency)
        if not isinstance(made, Worker | AsyncWorker):
            raise CliError(
                f"{spec!r} returned a {type(made).__name__}, not a Worker, AsyncWorker "
                "or Tasks registry",
                code=2,
            )
        if kwargs:
            return made
        obj = made
    if concurrency is not None:
        _with_concurrency(obj, concurrency)
    return obj


def _preflight(database: Database, schema: str) -> None:
    """Fail fast, in one line, on the database the user's module will read from the env."""
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        check_schema(store)  # a pure read: raises SchemaMissingError


def cmd_worker(args: argparse.Namespace, database: Database, schema: str) -> int:
    setup_logging(args.log_level)
    if args.metrics_port is not None:
        require_prometheus("--metrics-port")  # before anything is imported or bound
    _preflight(database, schema)
    export_to_environment(database, schema)
    if getattr(args, "processes", None) is not None:  # X1: each child resolves the target
        from ._processes import cmd_worker_processes

        return cmd_worker_processes(args, database, schema)
    worker = resolve_worker(args.target, args.concurrency, args.handler_processes)
    with serve_worker_http(args, database, schema, worker):
        log.info("running %s; SIGTERM or Ctrl-C stops it gracefully", args.target)
        if isinstance(worker, AsyncWorker):
            asyncio.run(worker.run())
        else:
            worker.run()
    return 0
