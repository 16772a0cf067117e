"""The asyncio face: ``AsyncStore``, ``AsyncQueue``, ``AsyncJobHandle``.

A thin layer, like SQLAlchemy's ``ext/asyncio``: each method validates through
the sync face's ``_core`` and runs the same call through ``run_sync``, on the
caller's ``AsyncSession``/``AsyncConnection`` or a connection of the store's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from ._calls import Call
from ._calls import admin as _admin
from ._calls import core as _core
from ._calls import workers as _workers
from ._calls import workflow as _workflow
from ._calls.core import QueueCore
from ._calls.faces import HandleFace, Lifecycle, QueueFace
from ._calls.handle import HandleCore
from ._db.engines import check_engine, owned_engine_args
from ._db.keepalives import asyncpg_keepalives
from ._db.owned import in_autocommit, own_connection
from ._db.sqlstate import schema_errors
from ._values.job import Job, JobStatus, QueueStats, SweepResult
from ._values.limits import Limits
from ._values.opts import EnqueueOpts, QueueOpts
from ._values.workers import WorkerInfo
from ._values.workflow import WorkflowStatus
from .schema import DEFAULT_SCHEMA

__all__ = ["AsyncJobHandle", "AsyncQueue", "AsyncStore"]

T = TypeVar("T")
AsyncSessionLike = AsyncSession | AsyncConnection


class AsyncStore:
    """A job store over an ``AsyncEngine`` (psycopg or asyncpg, D1) and one schema."""

    def __init__(self, engine: AsyncEngine, *, schema: str = DEFAULT_SCHEMA) -> None:
        check_engine(engine, AsyncEngine, "AsyncStore")
        self._life = Lifecycle(schema)
        self.engine = engine
        self._owns_engine = False

    @classmethod
    def from_url(
        cls, url: str | URL, *, schema: str = DEFAULT_SCHEMA, **engine_kw: Any
    ) -> AsyncStore:
        """A store that owns its engine (disposed on ``close()``)."""
        parsed, kw = owned_engine_args(url, engine_kw)
        engine = create_async_engine(parsed, **kw)
        if engine.dialect.driver == "asyncpg":  # its keepalives are socket options
            asyncpg_keepalives(engine)
        store = cls(engine, schema=schema)
        store._owns_engine = True
        return store

    @property
    def schema(self) -> str:
        return self._life.schema

    @property
    def closed(self) -> bool:
        return self._life.closed

    def queue(self, name: str, opts: QueueOpts | None = None) -> AsyncQueue:
        """A handle on queue ``name``; not awaitable: it touches no database (Q1)."""
        self._life.check_open()
        return AsyncQueue(self, self._life, QueueCore(self.schema, name, opts))

    async def queue_names(self) -> list[str]:
        """Every queue with a live row, a dead row or a pause in force, sorted (O6)."""
        return await self._run(_admin.queue_names(self.schema))

    async def stats(self) -> dict[str, QueueStats]:
        """``queue_names()`` mapped to each queue's stats, read in one snapshot (O6)."""
        return await self._run(_admin.store_stats(self.schema))

    async def workflow(self, run_id: int) -> WorkflowStatus | None:
        """G3: the awaitable twin of ``Store.workflow``."""
        return await self._run(_workflow.status(self.schema, run_id))

    async def workers(self) -> list[WorkerInfo]:
        """V1: the workers registered in this schema (running, or gone and not yet
        pruned), oldest start first, each with its jobs in flight."""
        return await self._run(_workers.listing(self.schema))

    async def close(self) -> None:
        if self._life.close() and self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _run(
        self, call: Call[T], session: AsyncSessionLike | None = None, *, atomic: bool = False
    ) -> T:
        self._life.check_open()
        with schema_errors(self.schema):
            if session is None:
                # The store's own connection: one that answered read-only
                # is invalidated, not pooled again (25006, a failover).
                if atomic:
                    async with self.engine.begin() as conn:
                        return await conn.run_sync(own_connection(call))
                async with self.engine.connect() as conn:
                    own = own_connection(in_autocommit(call))
                    return await conn.run_sync(own)
            if isinstance(session, AsyncSession):
                return await session.run_sync(_on_session, call)
            if isinstance(session, AsyncConnection):
                return await session.run_sync(call)
            raise TypeError(
                f"session must be an AsyncSession or AsyncConnection, got {type(session).__name__}"
            )


def _on_session(session: Session, call: Call[T]) -> T:
    connection: Connection = session.connection()
    return call(connection)


class AsyncQueue(QueueFace[AsyncStore]):
    """The awaitable twin of ``Queue``."""

    __slots__ = ()

    async def enqueue(
        self,
        payload: bytes,
        opts: EnqueueOpts | None = None,
        *,
        session: AsyncSessionLike | None = None,
    ) -> int:
        self._life.check_open()
        return await self._store._run(self._core.enqueue(payload, opts), session)

    async def enqueue_many(
        self,
        payloads: Iterable[bytes],
        opts: EnqueueOpts | None = None,
        *,
        session: AsyncSessionLike | None = None,
        unique_keys: Iterable[str | None] | None = None,
    ) -> list[int]:
        """Ids in input order; ``unique_keys``: one key per payload, None for none (U1)."""
        self._life.check_open()
        return await self._store._run(self._core.enqueue_many(payloads, opts, unique_keys), session)

    async def claim_one(
        self, worker_id: str, *, session: AsyncSessionLike | None = None
    ) -> AsyncJobHandle | None:
        handles = await self.claim_batch(worker_id, 1, session=session)
        return handles[0] if handles else None

    async def claim_batch(
        self,
        worker_id: str,
        n: int,
        *,
        max_batch_payload_bytes: int | None = None,
        session: AsyncSessionLike | None = None,
    ) -> list[AsyncJobHandle]:
        """Up to ``n`` jobs in claim order; ``max_batch_payload_bytes``: stop once
        their payloads add up to that many bytes (one job is always taken)."""
        self._life.check_open()
        call = self._core.claim(worker_id, n, max_batch_payload_bytes)
        if call is None:
            return []
        jobs = await self._store._run(call, session)
        return [
            AsyncJobHandle(self._store, self._life, HandleCore(self._core, job)) for job in jobs
        ]

    async def ack_batch(
        self, job_ids: Iterable[int], *, session: AsyncSessionLike | None = None
    ) -> int:
        self._life.check_open()
        call = self._core.ack_batch(job_ids)
        return 0 if call is None else await self._store._run(call, session)

    async def cancel(self, job_id: int, *, session: AsyncSessionLike | None = None) -> bool:
        self._life.check_open()
        return await self._store._run(self._core.cancel(job_id), session)

    async def get_job(self, job_id: int) -> Job | None:
        self._life.check_open()
        return await self._store._run(self._core.get_job(job_id))

    async def wait(self, job_id: int, *, timeout: float | timedelta | None = None) -> Job | None:
        """R3: the job's final ``Job`` once completed or dead; None once its row is
        gone with nothing kept; ``TimeoutError`` at ``timeout`` (None: forever)."""
        self._life.check_open()
        checked = _core.wait_args(job_id, timeout)
        from ._extras.waiters import wait_async  # the listener loads only for a wait

        return await wait_async(self, *checked)

    async def sweep_expired(self, *, session: AsyncSessionLike | None = None) -> SweepResult:
        """Q25; with ``session``, in the caller's transaction, else in one of its own."""
        self._life.check_open()
        return await self._store._run(self._core.sweep_expired(), session, atomic=True)

    async def jobs(
        self, status: JobStatus | None = None, *, limit: int = 100, before: int | None = None
    ) -> list[Job]:
        self._life.check_open()
        return await self._store._run(self._core.jobs(status, limit, before))

    async def requeue_dead(
        self,
        job_ids: Iterable[int] | None = None,
        *,
        limit: int = 1000,
        session: AsyncSessionLike | None = None,
    ) -> int:
        self._life.check_open()
        call = self._core.requeue_dead(job_ids, limit)
        return 0 if call is None else await self._store._run(call, session)

    async def purge_dead(
        self,
        job_ids: Iterable[int] | None = None,
        *,
        older_than: float | timedelta | None = None,
        session: AsyncSessionLike | None = None,
    ) -> int:
        self._life.check_open()
        call = self._core.purge_dead(job_ids, older_than)
        return 0 if call is None else await self._store._run(call, session)

    async def pause(self, *, session: AsyncSessionLike | None = None) -> bool:
        self._life.check_open()
        return await self._store._run(self._core.pause(), session)

    async def resume(self, *, session: AsyncSessionLike | None = None) -> bool:
        self._life.check_open()
        return await self._store._run(self._core.resume(), session)

    async def set_limits(
        self, limits: Limits | None, *, session: AsyncSessionLike | None = None
    ) -> None:
        self._life.check_open()  # F1: replace every limit; None removes them
        await self._store._run(self._core.set_limits(limits), session)

    async def limits(self) -> Limits | None:
        self._life.check_open()
        return await self._store._run(self._core.limits())

    async def stats(self) -> QueueStats:
        self._life.check_open()
        return await self._store._run(self._core.stats())


class AsyncJobHandle(HandleFace[AsyncStore]):
    """The awaitable twin of ``JobHandle``."""

    __slots__ = ()

    async def ack(
        self, result: bytes | None = None, *, session: AsyncSessionLike | None = None
    ) -> bool:
        """Q16; R1: a job stamped with keep_completed is kept, with ``result``."""
        self._life.check_open()
        return await self._store._run(self._core.ack(result), session)

    async def retry(
        self,
        error: str | None = None,
        delay: float | timedelta | None = None,
        *,
        session: AsyncSessionLike | None = None,
    ) -> bool:
        self._life.check_open()
        return await self._store._run(self._core.retry(error, delay), session) is not None

    async def fail(
        self, error: str | None = None, *, session: AsyncSessionLike | None = None
    ) -> bool:
        self._life.check_open()
        return await self._store._run(self._core.fail(error), session)

    async def snooze(
        self, delay: float | timedelta, *, session: AsyncSessionLike | None = None
    ) -> bool:
        """Z1: pending again ``delay`` seconds from now, the attempt refunded, no error kept."""
        self._life.check_open()
        return await self._store._run(self._core.snooze(delay), session)

    async def heartbeat(
        self, extend: float | timedelta, *, session: AsyncSessionLike | None = None
    ) -> bool:
        self._life.check_open()
        call = self._core.heartbeat(extend)
        return False if call is None else await self._store._run(call, session)


# -- for the worker's backend: the store's own way of running an operation -----


async def run_call(
    store: AsyncStore,
    call: Call[T],
    session: AsyncSessionLike | None = None,
    *,
    atomic: bool = False,
) -> T:
    """Run ``call`` as ``store``'s own methods do; ``atomic``: in one transaction."""
    return await store._run(call, session, atomic=atomic)


def queue_parts(queue: AsyncQueue) -> tuple[AsyncStore, QueueCore]:
    """The store behind ``queue`` and its I/O-free core (validated name, options, address)."""
    return queue._store, queue._core


async def detached_connection(store: AsyncStore) -> tuple[AsyncConnection, Any]:
    """A new connection of ``store``'s engine, taken out of its pool for good, and
    its driver connection (read before the detach, which forgets it).

    For the worker's asyncpg listener (D1): made as the pool makes connections
    (URL, ``connect_args``, ``creator``, ``do_connect``) but never handed back,
    so its LISTEN registrations cannot leak into the pool."""
    store._life.check_open()
    conn = await store.engine.connect()
    try:
        driver = (await conn.get_raw_connection()).driver_connection
        sync = conn.sync_connection
        assert sync is not None  # set by connect()
        sync.detach()
    except BaseException:
        await conn.close()
        raise
    return conn, driver
