"""The public faces: ``Worker`` (blocking) and ``AsyncWorker`` (awaitable); both
validate everything when built, before any SQL, and drive one asyncio runtime."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from datetime import timedelta
from typing import Any, TypeVar

from .._calls.core import batch_bytes
from .._values import validate as v
from ..aio import AsyncQueue, AsyncStore
from ..store import Queue, Store, queue_parts, run_call
from ..tasks import Tasks
from ..tasks._dispatch import handlers_for
from ..tasks._periodic import Periodic, checked_schedules
from ._handlers import HandlerSpec, inspect_handler
from ._pool import handler_pool
from ._registry import Registry
from ._state import Settings, WorkerHealth
from ._store_port import StoreBackend
from ._supervisor import Supervisor

__all__ = [
    "AsyncWorker",
    "Worker",
    "check_schema",
    "handled",
    "override_concurrency",
    "override_handler_executor",
    "own_handler_executor",
]

DEFAULT_CONCURRENCY = 8
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_SWEEP_INTERVAL = 60.0
DEFAULT_VACUUM_INTERVAL = 2.0

Handler = Callable[..., Any]
Q = TypeVar("Q", Queue, AsyncQueue)


def default_worker_id() -> str:
    """``host:pid:xxxxxxxx`` -- unique per worker object, readable in ``jobs.worker_id``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _settings(
    worker_id: str | None,
    concurrency: object,
    poll_interval: object,
    shutdown_timeout: object,
    job_timeout: object,
    sweep_interval: object,
    vacuum_interval: object,
    handle_signals: bool,
    max_batch_payload_bytes: object = None,
) -> Settings:
    return Settings(
        worker_id=v.worker_id(default_worker_id() if worker_id is None else worker_id),
        concurrency=v.integer(concurrency, "concurrency", minimum=1),
        poll_interval=v.duration(poll_interval, "poll_interval"),
        shutdown_timeout=v.duration(shutdown_timeout, "shutdown_timeout", allow_zero=True),
        job_timeout=v.optional_duration(job_timeout, "job_timeout"),
        sweep_interval=v.optional_duration(sweep_interval, "sweep_interval"),
        vacuum_interval=v.optional_duration(vacuum_interval, "vacuum_interval"),
        handle_signals=bool(handle_signals),
        max_batch_payload_bytes=batch_bytes(max_batch_payload_bytes),
    )


def _handlers(
    handlers: object, queue_type: type[Q], what: str, check: Callable[[HandlerSpec, str], None]
) -> list[tuple[Q, HandlerSpec]]:
    """Each queue of ``handlers`` with its handler inspected; every mistake raised here."""
    if isinstance(handlers, Tasks):  # T2: a registry runs as one handler per queue
        handlers = handlers_for(handlers, is_async=queue_type is AsyncQueue)
    if not isinstance(handlers, Mapping):
        raise TypeError(
            f"{what} takes a mapping {{queue: handler}} or a Tasks registry, "
            f"got {type(handlers).__name__}"
        )
    if not handlers:
        raise ValueError(f"{what} needs at least one queue")
    inspected: list[tuple[Q, HandlerSpec]] = []
    seen: set[tuple[int, str, str]] = set()
    for queue, fn in handlers.items():
        if not isinstance(queue, Queue | AsyncQueue) or not isinstance(queue, queue_type):
            raise TypeError(
                f"{what} takes {queue_type.__name__} keys (from "
                f"{'AsyncStore' if queue_type is AsyncQueue else 'Store'}.queue()), "
                f"got {type(queue).__name__}"
            )
        key = (id(queue.store.engine), queue.store.schema, queue.name)
        if key in seen:
            raise ValueError(f"{what}: queue {queue.name!r} appears twice")
        seen.add(key)
        spec = inspect_handler(fn, f"{what} queue {queue.name!r}")
        check(spec, queue.name)
        inspected.append((queue, spec))
    return inspected


class _Base:
    """What both faces share: the settings, stop(), and running once."""

    _periodic: list[Periodic]
    _queues: list[tuple[Any, HandlerSpec]]

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._supervisor = Supervisor(settings)
        self._started = False
        self._run_lock = threading.Lock()

    @property
    def worker_id(self) -> str:
        return self._settings.worker_id

    def stop(self) -> None:
        """Stop claiming and shut down gracefully (thread-safe, idempotent).

        In-flight handlers get ``shutdown_timeout`` seconds to finish and be
        acked; a second call releases them at once.  Calling it before
        ``run()`` makes ``run()`` return right after starting.
        """
        self._supervisor.stop()

    def health(self) -> WorkerHealth:
        """B5: how the worker is doing now (thread-safe; before and after a run,
        ``running`` is False).  ``health().healthy`` is what ``/healthz`` serves."""
        return self._supervisor.health()

    def _override_concurrency(self, concurrency: int) -> None:
        """For ``alkstore worker --concurrency``: change it on a worker built elsewhere.

        Only before ``run()``: the supervisor is rebuilt with the new settings.
        """
        with self._run_lock:
            if self._started:
                raise RuntimeError("cannot change the concurrency of a running worker")
            n = v.integer(concurrency, "concurrency", minimum=1)
            self._settings = dataclasses.replace(self._settings, concurrency=n)
            old = self._supervisor
            self._supervisor = Supervisor(self._settings)
            # A stop() asked for before still holds (read after the swap, so
            # one racing with it lands on either supervisor and is carried).
            for _ in range(old.stop_requests):
                self._supervisor.stop()

    @property
    def periodic(self) -> tuple[Periodic, ...]:
        """The schedules this worker fires (P1), in the order given."""
        return tuple(self._periodic)

    async def _run_on(self, backend: StoreBackend) -> None:
        bindings = [backend.bind(queue, spec) for queue, spec in self._queues]
        schedules = [(schedule, backend.port(schedule.queue)) for schedule in self._periodic]
        queues = [queue for queue, _ in self._queues]
        registry = Registry.of(self._settings.worker_id, self._settings.concurrency, queues)
        await self._supervisor.run(bindings, backend, schedules, registry)

    def _claim_run(self) -> None:
        with self._run_lock:
            if self._started:
                raise RuntimeError("a worker runs once; build a new one to run again")
            self._started = True


class Worker(_Base):
    """Runs sync handlers for sync ``Queue``s; ``run()`` blocks until stopped.

    ``handlers`` maps each ``Queue`` to a function ``(job)`` or
    ``(job, session)``; a session-scoped handler gets a ``Session`` whose
    transaction also acks the job (Q28).  ``concurrency`` is the number
    of jobs run at once per queue (each in a thread); ``poll_interval``
    seconds between re-polls; ``shutdown_timeout`` seconds of grace for
    in-flight jobs at stop; ``job_timeout`` (None = no limit) seconds after
    which a running job is retried as failed; ``sweep_interval`` seconds
    between sweeps of each queue (expiry and dead-letter retention, O7; None:
    never); every ``vacuum_interval`` seconds it looks at its jobs table and
    VACUUMs it once dead row versions pile up (when its role owns the table;
    None: never, leave it to autovacuum).  ``handlers`` may be a ``Tasks``
    registry instead (T2): each of its queues gets a handler that runs its
    tasks by name.  ``periodic``: the ``Periodic`` schedules this worker
    fires (P1).  ``max_batch_payload_bytes`` (None = no bound): no claim
    brings back more payload bytes than that, beyond its first job.
    ``handler_executor`` (X2): a ``concurrent.futures.Executor`` the sync
    handlers run in instead of the worker's threads -- a ``ProcessPoolExecutor``
    for CPU-bound ones; heartbeats and acks stay in the worker.
    """

    def __init__(
        self,
        handlers: Mapping[Queue, Handler] | Tasks[Store],
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float | timedelta = DEFAULT_POLL_INTERVAL,
        shutdown_timeout: float | timedelta = DEFAULT_SHUTDOWN_TIMEOUT,
        job_timeout: float | timedelta | None = None,
        sweep_interval: float | timedelta | None = DEFAULT_SWEEP_INTERVAL,
        vacuum_interval: float | timedelta | None = DEFAULT_VACUUM_INTERVAL,
        worker_id: str | None = None,
        handle_signals: bool = True,
        periodic: Iterable[Periodic] | None = None,
        max_batch_payload_bytes: int | None = None,
        handler_executor: Executor | None = None,
    ) -> None:
        def sync_only(spec: HandlerSpec, name: str) -> None:
            if spec.is_async:
                raise TypeError(
                    f"Worker queue {name!r}: handler {spec.name} is async; use AsyncWorker "
                    "with AsyncQueues for async handlers"
                )

        self._queues = _handlers(handlers, Queue, "Worker", sync_only)
        self._pool = handler_pool(handler_executor, [(q.name, h) for q, h in self._queues])
        self._periodic = checked_schedules(periodic, "Worker", is_async=False)
        super().__init__(
            _settings(
                worker_id,
                concurrency,
                poll_interval,
                shutdown_timeout,
                job_timeout,
                sweep_interval,
                vacuum_interval,
                handle_signals,
                max_batch_payload_bytes,
            )
        )

    @property
    def queues(self) -> tuple[Queue, ...]:
        """The queues this worker serves, in the order given."""
        return tuple(queue for queue, _ in self._queues)

    def run(self) -> None:
        """Block, running jobs, until ``stop()`` or SIGTERM/SIGINT; then return."""
        self._claim_run()
        threads = self._settings.concurrency * len(self._queues)
        # Heartbeats, retries and releases run on their own small pool (claims,
        # and acks when the pool allows, have held-connection lanes of their
        # own) so a full handler pool never delays a heartbeat; small, because
        # each call holds one of the engine's pooled connections while it runs.
        db_threads = min(16, 2 + 2 * len(self._queues))
        asyncio.run(self._run_on(StoreBackend(threads, db_threads, pool=self._pool)))


class AsyncWorker(_Base):
    """The asyncio twin of ``Worker``: ``await worker.run()``, ``worker.stop()``.

    Handlers are ``async def`` taking ``(job)`` or ``(job, AsyncSession)``;
    plain sync ``(job)`` handlers are accepted too and run in threads (or
    in ``handler_executor``, X2).
    """

    def __init__(
        self,
        handlers: Mapping[AsyncQueue, Handler] | Tasks[AsyncStore],
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float | timedelta = DEFAULT_POLL_INTERVAL,
        shutdown_timeout: float | timedelta = DEFAULT_SHUTDOWN_TIMEOUT,
        job_timeout: float | timedelta | None = None,
        sweep_interval: float | timedelta | None = DEFAULT_SWEEP_INTERVAL,
        vacuum_interval: float | timedelta | None = DEFAULT_VACUUM_INTERVAL,
        worker_id: str | None = None,
        handle_signals: bool = True,
        periodic: Iterable[Periodic] | None = None,
        max_batch_payload_bytes: int | None = None,
        handler_executor: Executor | None = None,
    ) -> None:

        def session_needs_async(spec: HandlerSpec, name: str) -> None:
            if spec.wants_session and not spec.is_async:
                raise TypeError(
                    f"AsyncWorker queue {name!r}: session-scoped handler {spec.name} must be "
                    "async (it gets an AsyncSession): an `async def`, or, if a decorator "
                    "wraps one in a plain function, a wrapper that is `async def` too "
                    "(functools.wraps keeps the name, not the async-ness); "
                    "use Worker for sync session handlers"
                )

        self._queues = _handlers(handlers, AsyncQueue, "AsyncWorker", session_needs_async)
        self._pool = handler_pool(handler_executor, [(q.name, h) for q, h in self._queues])
        self._periodic = checked_schedules(periodic, "AsyncWorker", is_async=True)
        super().__init__(
            _settings(
                worker_id,
                concurrency,
                poll_interval,
                shutdown_timeout,
                job_timeout,
                sweep_interval,
                vacuum_interval,
                handle_signals,
                max_batch_payload_bytes,
            )
        )

    @property
    def queues(self) -> tuple[AsyncQueue, ...]:
        """The queues this worker serves, in the order given."""
        return tuple(queue for queue, _ in self._queues)

    async def run(self) -> None:
        """Run jobs until ``stop()`` or SIGTERM/SIGINT; then return."""
        self._claim_run()
        sync_queues = sum(1 for _, spec in self._queues if not spec.is_async)
        await self._run_on(
            StoreBackend(self._settings.concurrency * sync_queues, 1, pool=self._pool)
        )


def handled(worker: Worker | AsyncWorker) -> list[tuple[Any, HandlerSpec]]:
    """Each queue of ``worker`` with its inspected handler (``alkstore_sa.testing``)."""
    return list(worker._queues)


def override_concurrency(worker: Worker | AsyncWorker, concurrency: int) -> None:
    """For ``alkstore worker --concurrency`` (only before ``run()``: else RuntimeError)."""
    worker._override_concurrency(concurrency)


def override_handler_executor(worker: Worker | AsyncWorker, executor: Executor) -> None:
    """For ``alkstore worker --handler-processes N`` (X2): run a built worker's sync
    handlers in ``executor``, shut down when its run ends (checks as the constructor's)."""
    worker._pool = handler_pool(executor, [(q.name, h) for q, h in worker._queues], owned=True)


def own_handler_executor(worker: Worker | AsyncWorker) -> None:
    """X1's child: its worker shuts its ``handler_executor`` down when its run ends."""
    if worker._pool is not None:
        worker._pool.adopt()


def check_schema(store: Store) -> None:
    """Raise ``SchemaMissingError`` unless ``store``'s tables are there and up to
    date: the check a worker makes before its first claim (B5)."""
    _, core = queue_parts(store.queue("preflight"))
    run_call(store, core.check_schema())
