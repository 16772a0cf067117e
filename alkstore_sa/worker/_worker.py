"""The public faces: ``Worker`` (blocking) and ``AsyncWorker`` (awaitable).

Both validate everything when built, before touching the database, and
drive the same asyncio runtime (``_runtime``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from .. import _validate as v
from ..aio import AsyncQueue
from ..store import Queue
from ._backend import AsyncBackend, SyncBackend
from ._handlers import HandlerSpec, inspect_handler
from ._runtime import QueueSpec, Runtime, Settings

__all__ = ["AsyncWorker", "Worker"]

DEFAULT_CONCURRENCY = 8
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_SHUTDOWN_TIMEOUT = 30.0

Handler = Callable[..., Any]


def default_worker_id() -> str:
    """``host:pid:xxxxxxxx`` -- unique per worker object, readable in ``jobs.worker_id``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _settings(
    worker_id: str | None,
    concurrency: object,
    poll_interval: object,
    shutdown_timeout: object,
    job_timeout: object,
    handle_signals: bool,
) -> Settings:
    return Settings(
        worker_id=v.worker_id(default_worker_id() if worker_id is None else worker_id),
        concurrency=v.integer(concurrency, "concurrency", minimum=1),
        poll_interval=v.duration(poll_interval, "poll_interval"),
        shutdown_timeout=v.duration(shutdown_timeout, "shutdown_timeout", allow_zero=True),
        job_timeout=v.optional_duration(job_timeout, "job_timeout"),
        handle_signals=bool(handle_signals),
    )


def _specs(
    handlers: object, queue_type: type, what: str, check: Callable[[HandlerSpec, str], None]
) -> list[QueueSpec]:
    if not isinstance(handlers, Mapping):
        raise TypeError(f"{what} takes a mapping {{queue: handler}}, got {type(handlers).__name__}")
    if not handlers:
        raise ValueError(f"{what} needs at least one queue")
    specs: list[QueueSpec] = []
    seen: set[tuple[int, str, str]] = set()
    for queue, fn in handlers.items():
        if not isinstance(queue, Queue | AsyncQueue) or not isinstance(queue, queue_type):
            raise TypeError(
                f"{what} takes {queue_type.__name__} keys (from "
                f"{'AsyncStore' if queue_type is AsyncQueue else 'Store'}.queue()), "
                f"got {type(queue).__name__}"
            )
        store = queue._store
        key = (id(store.engine), store.schema, queue.name)
        if key in seen:
            raise ValueError(f"{what}: queue {queue.name!r} appears twice")
        seen.add(key)
        spec = inspect_handler(fn, f"{what} queue {queue.name!r}")
        check(spec, queue.name)
        specs.append(QueueSpec(store=store, core=queue._core, handler=spec))
    return specs


class _Base:
    _runtime: Runtime
    _settings: Settings
    _specs: list[QueueSpec]

    def __init__(self) -> None:
        self._started = False
        self._run_lock = threading.Lock()

    @property
    def worker_id(self) -> str:
        return self._runtime._settings.worker_id

    def stop(self) -> None:
        """Stop claiming and shut down gracefully (thread-safe, idempotent).

        In-flight handlers get ``shutdown_timeout`` seconds to finish and be
        acked; a second call releases them at once.  Calling it before
        ``run()`` makes ``run()`` return right after starting.
        """
        self._runtime.stop()

    def _override_concurrency(self, concurrency: int) -> None:
        """For ``alkstore worker --concurrency``: change it on a worker built elsewhere.

        Only before ``run()``: the runtime is rebuilt with the new settings.
        """
        with self._run_lock:
            if self._started:
                raise RuntimeError("cannot change the concurrency of a running worker")
            n = v.integer(concurrency, "concurrency", minimum=1)
            self._settings = dataclasses.replace(self._settings, concurrency=n)
            old = self._runtime
            self._runtime = Runtime(self._specs, self._settings)
            # A stop() asked for before still holds (read after the swap, so
            # one racing with it lands on either runtime and is carried).
            for _ in range(old.stop_requests):
                self._runtime.stop()

    def _claim_run(self) -> None:
        with self._run_lock:
            if self._started:
                raise RuntimeError("a worker runs once; build a new one to run again")
            self._started = True


class Worker(_Base):
    """Runs sync handlers for sync ``Queue``s; ``run()`` blocks until stopped.

    ``handlers`` maps each ``Queue`` to a function ``(job)`` or
    ``(job, session)``; a session-scoped handler gets a ``Session`` whose
    transaction also acks the job (SPEC Q28).  ``concurrency`` is the number
    of jobs run at once per queue (each in a thread); ``poll_interval``
    seconds between re-polls; ``shutdown_timeout`` seconds of grace for
    in-flight jobs at stop; ``job_timeout`` (None = no limit) seconds after
    which a running job is retried as failed.
    """

    def __init__(
        self,
        handlers: Mapping[Queue, Handler],
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float | timedelta = DEFAULT_POLL_INTERVAL,
        shutdown_timeout: float | timedelta = DEFAULT_SHUTDOWN_TIMEOUT,
        job_timeout: float | timedelta | None = None,
        worker_id: str | None = None,
        handle_signals: bool = True,
    ) -> None:
        super().__init__()

        def sync_only(spec: HandlerSpec, name: str) -> None:
            if spec.is_async:
                raise TypeError(
                    f"Worker queue {name!r}: handler {spec.name} is async; use AsyncWorker "
                    "with AsyncQueues for async handlers"
                )

        self._specs = _specs(handlers, Queue, "Worker", sync_only)
        self._settings = _settings(
            worker_id, concurrency, poll_interval, shutdown_timeout, job_timeout, handle_signals
        )
        self._runtime = Runtime(self._specs, self._settings)

    def run(self) -> None:
        """Block, running jobs, until ``stop()`` or SIGTERM/SIGINT; then return."""
        self._claim_run()
        threads = self._settings.concurrency * len(self._specs)
        # Heartbeats, retries and releases run on their own small pool (claims,
        # and acks when the pool allows, have held-connection lanes of their
        # own) so a full handler pool never delays a heartbeat; small, because
        # each call holds one of the engine's pooled connections while it runs.
        db_threads = min(16, 2 + 2 * len(self._specs))
        asyncio.run(self._runtime.run(SyncBackend(threads, db_threads)))


class AsyncWorker(_Base):
    """The asyncio twin of ``Worker``: ``await worker.run()``, ``worker.stop()``.

    Handlers are ``async def`` taking ``(job)`` or ``(job, AsyncSession)``;
    plain sync ``(job)`` handlers are accepted too and run in threads.
    """

    def __init__(
        self,
        handlers: Mapping[AsyncQueue, Handler],
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float | timedelta = DEFAULT_POLL_INTERVAL,
        shutdown_timeout: float | timedelta = DEFAULT_SHUTDOWN_TIMEOUT,
        job_timeout: float | timedelta | None = None,
        worker_id: str | None = None,
        handle_signals: bool = True,
    ) -> None:
        super().__init__()

        def session_needs_async(spec: HandlerSpec, name: str) -> None:
            if spec.wants_session and not spec.is_async:
                raise TypeError(
                    f"AsyncWorker queue {name!r}: session-scoped handler {spec.name} must be "
                    "async (it gets an AsyncSession): an `async def`, or, if a decorator "
                    "wraps one in a plain function, a wrapper that is `async def` too "
                    "(functools.wraps keeps the name, not the async-ness); "
                    "use Worker for sync session handlers"
                )

        self._specs = _specs(handlers, AsyncQueue, "AsyncWorker", session_needs_async)
        self._settings = _settings(
            worker_id, concurrency, poll_interval, shutdown_timeout, job_timeout, handle_signals
        )
        self._runtime = Runtime(self._specs, self._settings)

    async def run(self) -> None:
        """Run jobs until ``stop()`` or SIGTERM/SIGINT; then return."""
        self._claim_run()
        sync_queues = sum(1 for s in self._specs if not s.handler.is_async)
        await self._runtime.run(AsyncBackend(self._settings.concurrency * sync_queues))
