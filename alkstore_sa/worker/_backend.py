"""How the runtime reaches the database and runs handlers, sync or async.

The runtime is asyncio-native; the only difference between ``Worker`` and
``AsyncWorker`` is here.  The sync backend runs each database call on a
small thread pool through the sync ``Store`` (so the sync engine is used
exactly as the sync API uses it); the async backend awaits the
``AsyncStore``.  Sync handlers always run on a thread pool, async handlers
as tasks on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from .._core import Call, HandleCore
from .._job import Job
from ..aio import AsyncStore
from ..store import Store
from ._handlers import HandlerSpec
from ._threads import Lane

__all__ = ["AsyncBackend", "Backend", "SyncBackend"]

log = logging.getLogger("alkstore_sa.worker")

T = TypeVar("T")
# At the end of a run, how long to wait for DB calls still on their threads.
DB_CLOSE_WAIT = 10.0
AnyStore = Store | AsyncStore


class Backend(Protocol):
    async def run(self, store: Any, call: Call[T]) -> T: ...

    async def claim(self, store: Any, call: Call[T]) -> T: ...

    async def ack(self, store: Any, call: Call[T]) -> T: ...

    def start(
        self, store: Any, spec: HandlerSpec, job: Job, core: HandleCore
    ) -> asyncio.Future[Any]: ...

    def follow(self, spec: HandlerSpec, result: Any) -> asyncio.Future[Any]:
        """What to wait for when a handler called as sync returned an awaitable."""
        ...

    def close(self) -> None: ...


def returned_awaitable(spec: HandlerSpec, result: object) -> TypeError:
    """The error for a sync-called handler that returned an awaitable it cannot run.

    An ``async def`` behind a plain sync decorator looks sync to the
    signature check; its body only runs when awaited, so acking here would
    record work that never happened.  The coroutine is closed so Python does
    not warn that it was never awaited.
    """
    close = getattr(result, "close", None)
    if inspect.iscoroutine(result) and callable(close):
        close()
    return TypeError(
        f"handler {spec.name} returned a coroutine ({type(result).__name__}) instead of "
        "running; async handlers must be run by AsyncWorker"
    )


def _sync_session_call(store: Store, spec: HandlerSpec, job: Job, core: HandleCore) -> bool:
    """SPEC Q28: the handler's writes and the ack commit together or not at all."""
    with Session(store.engine) as session:
        result = spec.fn(job, session)
        if inspect.isawaitable(result):
            # Its body never ran: no ack (the session rolls back on the way out).
            raise returned_awaitable(spec, result)
        acked = store._run(core.ack(), session)
        if acked:
            session.commit()
        else:
            session.rollback()  # the claim was lost: undo the handler's writes
        return acked


async def _async_session_call(
    store: AsyncStore, fn: Callable[..., Any], job: Job, core: HandleCore
) -> bool:
    async with AsyncSession(store.engine) as session:
        await fn(job, session)
        acked = await store._run(core.ack(), session)
        if acked:
            await session.commit()
        else:
            await session.rollback()
        return acked


class _Threads:
    """Thread lanes shared by both backends: one for handlers, one for DB calls.

    Made on first use, on the running loop.
    """

    def __init__(self, handler_threads: int, db_threads: int) -> None:
        self._sizes = (handler_threads, db_threads)
        self._handlers: Lane | None = None
        self._db: Lane | None = None

    @property
    def handlers(self) -> Lane:
        if self._handlers is None:
            loop = asyncio.get_running_loop()
            self._handlers = Lane(loop, self._sizes[0], "alkstore-handler")
        return self._handlers

    @property
    def db(self) -> Lane:
        if self._db is None:
            self._db = Lane(asyncio.get_running_loop(), self._sizes[1], "alkstore-db")
        return self._db

    def close(self) -> None:
        # A handler past its job timeout or the shutdown grace cannot be
        # interrupted (Python threads cannot be killed); do not wait for it.
        if self._handlers is not None:
            self._handlers.close()
        if self._db is not None:
            self._db.close(wait=DB_CLOSE_WAIT)


class _Held:
    """One autocommit connection per store, kept by one hot-path thread.

    Claims are the hot path (one per wake, one per ``concurrency`` jobs of a
    backlog): checking a connection out of the pool for each costs an
    isolation-level switch there and back, plus a ping with
    ``pool_pre_ping``.  Claims skip locked rows, so this connection never
    waits on another transaction (acks only wait on a row some other
    transaction locked, and then only acks wait).  Any error drops it (back
    to the pool); the next call checks out a fresh one.  Only its thread
    uses it.
    """

    def __init__(self) -> None:
        self._conns: dict[int, tuple[Store, Connection]] = {}

    def run(self, store: Store, call: Call[T]) -> T:
        held = self._conns.get(id(store))
        if held is None:
            conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conns[id(store)] = (store, conn)
        else:
            conn = held[1]
        try:
            return store._run(call, conn)
        except BaseException:
            self._drop(id(store))
            raise

    def _drop(self, key: int) -> None:
        held = self._conns.pop(key, None)
        if held is not None:
            try:
                held[1].close()
            except Exception:  # already broken: the pool discards it
                log.debug("closing a held connection failed", exc_info=True)

    def close(self) -> None:
        for key in list(self._conns):
            self._drop(key)


class _HotLane:
    """One thread and its held connections: for one kind of hot-path call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held = _Held()
        self.lane: Lane | None = None

    async def run(self, store: Store, call: Call[T]) -> T:
        if self.lane is None:
            self.lane = Lane(asyncio.get_running_loop(), 1, self.name)
        result: T = await self.lane.submit(functools.partial(self.held.run, store, call))
        return result

    def close(self) -> None:
        if self.lane is not None:
            # The held connections go back to the pool on the lane's thread,
            # after any call still running there.
            self.lane.submit_nowait(self.held.close)
            self.lane.close(wait=DB_CLOSE_WAIT)


def _pool_capacity(engine: Any) -> int:
    """How many connections ``engine``'s pool can hand out (0: unknown)."""
    pool = engine.pool
    size = getattr(pool, "size", None)
    if not callable(size):
        return 0
    overflow = getattr(pool, "_max_overflow", 0)
    return 1 << 30 if overflow < 0 else int(size()) + max(int(overflow), 0)


# Acks hold a connection of their own only when the pool has this many: a
# small pool (smaller than the handlers' needs) keeps them on the shared
# lane so session handlers and heartbeats are never starved of connections.
HOLD_ACKS_MIN_POOL = 6


class SyncBackend:
    def __init__(self, handler_threads: int, db_threads: int) -> None:
        self._threads = _Threads(handler_threads, db_threads)
        self._claims = _HotLane("alkstore-claim")
        self._acks = _HotLane("alkstore-ack")

    async def run(self, store: Store, call: Call[T]) -> T:
        result: T = await self._threads.db.submit(functools.partial(store._run, call))
        return result

    async def claim(self, store: Store, call: Call[T]) -> T:
        return await self._claims.run(store, call)

    async def ack(self, store: Store, call: Call[T]) -> T:
        if _pool_capacity(store.engine) >= HOLD_ACKS_MIN_POOL:
            return await self._acks.run(store, call)
        return await self.run(store, call)

    def start(
        self, store: Store, spec: HandlerSpec, job: Job, core: HandleCore
    ) -> asyncio.Future[Any]:
        if spec.wants_session:
            fn = functools.partial(_sync_session_call, store, spec, job, core)
        else:
            fn = functools.partial(spec.fn, job)
        return self._threads.handlers.submit(fn)

    def follow(self, spec: HandlerSpec, result: Any) -> asyncio.Future[Any]:
        # No loop of the handler's own to run it on: a failed attempt, retried.
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_exception(returned_awaitable(spec, result))
        return fut

    def close(self) -> None:
        self._threads.close()
        self._claims.close()
        self._acks.close()


class AsyncBackend:
    def __init__(self, handler_threads: int) -> None:
        self._threads = _Threads(handler_threads, 1)

    async def run(self, store: AsyncStore, call: Call[T]) -> T:
        return await store._run(call)

    async def claim(self, store: AsyncStore, call: Call[T]) -> T:
        return await store._run(call)

    async def ack(self, store: AsyncStore, call: Call[T]) -> T:
        return await store._run(call)

    def start(
        self, store: AsyncStore, spec: HandlerSpec, job: Job, core: HandleCore
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        if spec.is_async:
            if spec.wants_session:
                return loop.create_task(_async_session_call(store, spec.fn, job, core))
            started: asyncio.Future[Any] = asyncio.ensure_future(spec.fn(job))
            return started
        # Plain sync handlers are allowed on an AsyncWorker: they get a thread.
        return self._threads.handlers.submit(functools.partial(spec.fn, job))

    def follow(self, spec: HandlerSpec, result: Any) -> asyncio.Future[Any]:
        # Awaited here on the loop (a task, so a timeout or shutdown can cancel
        # it), never on the handler thread that merely created it.
        awaited: asyncio.Future[Any] = asyncio.ensure_future(result)
        return awaited

    def close(self) -> None:
        self._threads.close()
