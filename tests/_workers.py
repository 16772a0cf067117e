"""Run a Worker or an AsyncWorker in a background thread for a test.

``start_worker(kind, database_url, build)`` makes a store of the right kind
(sync ``Store`` or ``AsyncStore`` over its own engine), calls
``build(store)`` to get the worker, runs it in a thread (``worker.run()`` or
``asyncio.run(worker.run())``), and hands back a ``Running`` whose
``stop()`` stops it, joins, and re-raises anything ``run()`` raised.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import URL, create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Store, Worker

from . import _drivers

# "sync", then the async face on each driver under test ("async" = psycopg).
KINDS = ["sync", *_drivers.ASYNC_FACES]


class Running:
    def __init__(self, worker: Worker | AsyncWorker, thread: threading.Thread) -> None:
        self.worker = worker
        self.thread = thread
        self.error: BaseException | None = None
        self.returned_at: float | None = None

    def stop(self, timeout: float = 20.0) -> float:
        """Stop, wait for ``run()`` to return; returns how long that took."""
        began = time.monotonic()
        self.worker.stop()
        return self.join(timeout) - began

    def join(self, timeout: float = 20.0) -> float:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker.run() did not return"
        if self.error is not None:
            raise self.error
        assert self.returned_at is not None
        return self.returned_at


def start_worker(
    kind: str,
    database_url: URL,
    build: Callable[[Any], Worker | AsyncWorker],
    **engine_kw: Any,
) -> Running:
    """Build a worker on a fresh store of ``kind`` and run it in a thread.

    ``engine_kw`` go to ``create_engine`` / ``create_async_engine``.
    """
    engine_kw = {"pool_size": 10, "max_overflow": 20, **engine_kw}
    if kind == "sync":
        engine = create_engine(database_url, **engine_kw)
        store: Any = Store(engine)
        worker = build(store)

        def target() -> None:
            try:
                assert isinstance(worker, Worker)
                worker.run()
            finally:
                engine.dispose()

    else:
        aengine = create_async_engine(_drivers.async_url(database_url, kind), **engine_kw)
        store = AsyncStore(aengine)
        worker = build(store)

        def target() -> None:
            async def main() -> None:
                try:
                    assert isinstance(worker, AsyncWorker)
                    await worker.run()
                finally:
                    await aengine.dispose()

            asyncio.run(main())

    running = Running(worker, threading.Thread(daemon=True))

    def wrapped() -> None:
        try:
            target()
        except BaseException as exc:
            running.error = exc
        finally:
            running.returned_at = time.monotonic()

    running.thread = threading.Thread(target=wrapped, daemon=True, name=f"worker-{kind}")
    running.thread.start()
    return running


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, every: float = 0.01) -> Any:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


def handler(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a handler of the worker's kind (sync, or an async wrapper)."""
    if kind == "sync":
        return fn

    async def plain(job: Any) -> Any:
        return fn(job)

    return plain


def worker_class(kind: str) -> type[Worker] | type[AsyncWorker]:
    return Worker if kind == "sync" else AsyncWorker


def stuck_handler(kind: str, started: threading.Event, release: threading.Event) -> Any:
    """A handler that signals ``started`` and then hangs (sync: until ``release``)."""
    if kind == "sync":

        def stuck(job: Any) -> None:
            started.set()
            release.wait(10)

        return stuck

    async def astuck(job: Any) -> None:
        started.set()
        await asyncio.sleep(10)

    return astuck
