"""The one real ``QueuePort``: a queue's calls (``QueueCore``) through a runner.

A ``StorePort`` builds each call from its queue's core and hands it to a
runner, which says where and how it runs: ``SyncRunner`` (a ``Store``'s
calls on threads, claims and acks on held connections) or ``AsyncRunner``
(an ``AsyncStore``'s calls awaited on the loop).  The ``StoreBackend`` is
what the ports of one run share (threads, held connections); it picks the
runner from the queue's face, and the listener from the engine's driver.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from .._calls import Call
from .._calls.core import QueueCore
from .._db.ops import Released, Retried
from .._db.vacuum import Vacuumed
from .._values.job import Job, SweepResult
from ..aio import AsyncQueue, AsyncStore
from ..aio import queue_parts as async_queue_parts
from ..store import Queue, queue_parts
from ..tasks._periodic import Fired, Periodic
from ._async_runner import AsyncRunner
from ._handlers import HandlerSpec, Scope
from ._listener import listen, listen_asyncpg, listen_conninfo
from ._pool import HandlerPool
from ._port import ClaimKey, QueuePort, Recovery, Wake
from ._state import QueueBinding
from ._sync_runner import DB_CLOSE_WAIT, SyncLanes, SyncRunner
from ._threads import RunLanes

__all__ = ["Runner", "StoreBackend", "StorePort"]

T = TypeVar("T")
Started = asyncio.Future[object]


class Runner(Protocol):
    """Where a port's calls and handlers run (``SyncRunner``, ``AsyncRunner``)."""

    @property
    def engine(self) -> Engine | AsyncEngine: ...

    @property
    def asyncpg_store(self) -> AsyncStore | None: ...

    async def run(self, call: Call[T], *, atomic: bool = False) -> T: ...

    async def claim(self, call: Call[T], on_reply: Callable[[T], None] | None = None) -> T: ...

    def abort_claim(self) -> None: ...

    async def ack(self, call: Call[T]) -> T: ...

    def start(self, spec: HandlerSpec, core: QueueCore, job: Job, scope: Scope) -> Started: ...

    def follow(self, spec: HandlerSpec, result: Awaitable[object]) -> Started: ...


class StorePort:
    """A ``QueuePort`` over a runner; ``handler`` None for a queue only fired into (P1)."""

    def __init__(self, runner: Runner, core: QueueCore, handler: HandlerSpec | None) -> None:
        self.runner = runner
        self._queue = core
        self._handler = handler

    @property
    def listen_group(self) -> Hashable:
        return id(self.runner.engine)

    async def claim(
        self,
        worker_id: str,
        n: int,
        max_batch_payload_bytes: int | None = None,
        *,
        on_reply: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        call = self._queue.claim(worker_id, n, max_batch_payload_bytes)
        return [] if call is None else await self.runner.claim(call, on_reply)

    def abort_claim(self) -> None:
        self.runner.abort_claim()

    async def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        return await self.runner.ack(self._queue.ack_claims(list(claims)))

    async def ack_kept(self, claim: ClaimKey, result: bytes | None) -> bool:
        return await self.runner.run(self._queue.ack_claim(*claim, kept=True, result=result))

    async def heartbeat(self, claims: Sequence[ClaimKey]) -> list[int]:
        return await self.runner.run(self._queue.heartbeat_claims(list(claims)))

    async def gone(self, job_ids: Sequence[int]) -> list[int]:
        return await self.runner.run(self._queue.gone(list(job_ids)))

    async def retry(
        self, claim: ClaimKey, error: str | None, delay: float, traceback: str | None
    ) -> Retried | None:
        return await self.runner.run(self._queue.retry_claim(*claim, error, delay, traceback))

    async def fail(self, claim: ClaimKey, error: str | None, traceback: str | None) -> bool:
        return await self.runner.run(self._queue.fail_claim(*claim, error, traceback))

    async def snooze(self, claim: ClaimKey, delay: float) -> bool:
        return await self.runner.run(self._queue.snooze_claim(*claim, delay))

    async def release(self, claim: ClaimKey) -> Released | None:
        return await self.runner.run(self._queue.release(*claim))

    async def sweep(self) -> SweepResult:
        return await self.runner.run(self._queue.sweep_expired(), atomic=True)

    async def record_outcomes(self, acked: int, retried: int, dead: int) -> None:
        await self.runner.run(self._queue.record_outcomes(acked, retried, dead))

    async def check_schema(self) -> None:
        await self.runner.run(self._queue.check_schema())

    async def vacuum(self, min_dead: int, live_fraction: float) -> Vacuumed:
        # The store's autocommit path (VACUUM cannot run in a transaction).
        return await self.runner.run(self._queue.vacuum_jobs(min_dead, live_fraction))

    async def listen_conninfo(self, application_name: str) -> str:
        call = functools.partial(listen_conninfo, application_name=application_name)
        return await self.runner.run(call)

    async def fire(self, schedule: Periodic) -> Fired:
        """P1: fire ``schedule`` if a slot of it is due, in one transaction."""
        return await self.runner.run(schedule.fire_call(), atomic=True)

    def start(
        self, job: Job, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        return self.runner.start(self._spec, self._queue, job, scope)

    def follow(self, result: Awaitable[object]) -> asyncio.Future[object]:
        return self.runner.follow(self._spec, result)

    @property
    def _spec(self) -> HandlerSpec:
        if self._handler is None:
            raise RuntimeError(f"queue {self._queue.name!r} has no handler in this run")
        return self._handler


class StoreBackend:
    """What one run's ports share: the handler and database lanes, held connections.

    ``inline``: sync stores' calls and handlers run in the calling thread
    (``alkstore_sa.testing``), not on threads.
    """

    def __init__(
        self,
        handler_threads: int,
        db_threads: int,
        *,
        inline: bool = False,
        pool: HandlerPool | None = None,
    ) -> None:
        self._lanes = RunLanes(handler_threads, db_threads)
        self._pool = pool  # X2: the worker's handler_executor, for its sync handlers
        self._sync = SyncLanes.inline() if inline else SyncLanes(self._lanes)
        self._runners: dict[Hashable, Runner] = {}  # one per engine: what it listens with

    def port(self, queue: Queue | AsyncQueue) -> StorePort:
        """A port to ``queue`` with no handler: what a schedule fires into (P1)."""
        return self._port(queue, None)[0]

    def bind(self, queue: Queue | AsyncQueue, handler: HandlerSpec) -> QueueBinding:
        port, core = self._port(queue, handler)
        return QueueBinding(core, handler, port)

    def _port(
        self, queue: Queue | AsyncQueue, handler: HandlerSpec | None
    ) -> tuple[StorePort, QueueCore]:
        runner: Runner
        if isinstance(queue, Queue):
            store, core = queue_parts(queue)
            runner = SyncRunner(store, self._sync, self._pool)
        else:
            astore, core = async_queue_parts(queue)
            runner = AsyncRunner(astore, self._lanes, self._pool)
        port = StorePort(runner, core, handler)
        self._runners.setdefault(port.listen_group, runner)
        return port, core

    async def listen(
        self,
        port: QueuePort,
        application_name: str,
        channels: Sequence[str],
        wake: Wake,
        on_listening: Callable[[bool], None],
        recovery: Recovery,
    ) -> None:
        """psycopg's listener, or asyncpg's where the engine speaks asyncpg (D1)."""
        asyncpg_store = self._runners[port.listen_group].asyncpg_store
        if asyncpg_store is not None:
            await listen_asyncpg(
                asyncpg_store, application_name, channels, wake, on_listening, recovery
            )
        else:
            await listen(port, application_name, channels, wake, on_listening, recovery)

    def close(self) -> None:
        self._lanes.close(db_wait=DB_CLOSE_WAIT)
        self._sync.close()
        if self._pool is not None:
            self._pool.close()
