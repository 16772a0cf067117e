"""The async runner: a ``StorePort``'s calls awaited through an ``AsyncStore``.

Database calls are awaited on the loop through the async store, exactly as
the async API runs them (``aio.run_call``).  Async handlers run as tasks on
the loop (a session-scoped one with an ``AsyncSession`` whose transaction
also acks its job, Q28); plain sync ``(job)`` handlers get a thread of the
run's handler lane.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from .._calls import Call
from .._calls.core import QueueCore
from .._db.sockets import shutdown_socket
from .._values.job import Job
from ..aio import AsyncStore, run_call
from ._handlers import HandlerSpec, Scope, awaited_in, scoped
from ._pool import HandlerPool
from ._sync_runner import session_ack
from ._threads import RunLanes

__all__ = ["AsyncRunner"]

T = TypeVar("T")
Started = asyncio.Future[object]


class AsyncRunner:
    """The runner of a ``StorePort`` over an ``AsyncStore``."""

    def __init__(self, store: AsyncStore, lanes: RunLanes, pool: HandlerPool | None = None) -> None:
        self._store = store
        self._lanes = lanes
        self._pool = pool  # X2: plain sync handlers run in the worker's handler_executor
        self._claiming: Connection | None = None  # the claim's, while it runs

    @property
    def engine(self) -> AsyncEngine:
        return self._store.engine

    @property
    def asyncpg_store(self) -> AsyncStore | None:
        """The store, when its engine speaks asyncpg: it listens the asyncpg way (D1)."""
        return self._store if self._store.engine.dialect.driver == "asyncpg" else None

    async def run(self, call: Call[T], *, atomic: bool = False) -> T:
        return await run_call(self._store, call, atomic=atomic)

    async def claim(self, call: Call[T], on_reply: Callable[[T], None] | None = None) -> T:
        def tracked(conn: Connection) -> T:
            # Known while it runs, so abort_claim can break it.
            self._claiming = conn
            try:
                return call(conn)
            finally:
                self._claiming = None

        result = await run_call(self._store, tracked)
        if on_reply is not None:  # on the loop: async handlers start as tasks
            on_reply(result)
        return result

    def abort_claim(self) -> None:
        # Shut its socket down rather than cancel: a cancelled psycopg query
        # sends a cancel request and then waits 5 s more for the reply that
        # a silent peer never sends (asyncpg waits too).
        conn = self._claiming
        if conn is not None:
            shutdown_socket(conn)

    async def ack(self, call: Call[T]) -> T:
        return await run_call(self._store, call)

    def start(self, spec: HandlerSpec, core: QueueCore, job: Job, scope: Scope) -> Started:
        if not spec.is_async:
            # Plain sync handlers are allowed on an AsyncWorker: they get a thread.
            if self._pool is not None:
                return self._pool.run(spec.fn, job, scope)
            return self._lanes.handlers.submit(scoped(functools.partial(spec.fn, job), scope))
        run: Awaitable[object] = (
            _session_call(self._store, spec, core, job) if spec.wants_session else spec.fn(job)
        )
        return asyncio.ensure_future(run if scope is None else awaited_in(scope, run))

    def follow(self, spec: HandlerSpec, result: Awaitable[object]) -> Started:
        # Awaited here on the loop (a task, so a timeout or shutdown can cancel
        # it), never on the handler thread that merely created it.
        return asyncio.ensure_future(result)


async def _session_call(store: AsyncStore, spec: HandlerSpec, core: QueueCore, job: Job) -> bool:
    """Q28: the handler's writes and the ack commit together or not at all."""
    async with AsyncSession(store.engine) as session:
        result = await spec.fn(job, session)
        acked = await run_call(store, session_ack(core, job, result), session)
        if acked:
            await session.commit()
        else:
            await session.rollback()
        return acked
