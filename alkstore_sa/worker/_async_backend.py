"""The ``AsyncWorker``'s backend: queue ports over an ``AsyncStore``.

Database calls are awaited on the loop through the async store, exactly as
the async API runs them (``aio.run_call``).  Async handlers run as tasks on
the loop (a session-scoped one with an ``AsyncSession`` whose transaction
also acks its job, Q28); plain sync ``(job)`` handlers get a thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from .._calls.core import HandleCore, QueueCore
from .._db.ops import Released, Retried, Vacuumed
from .._db.sockets import shutdown_socket
from .._values.job import Job, SweepResult
from ..aio import AsyncQueue, AsyncStore, queue_parts, run_call
from ._handlers import HandlerSpec, awaited_in, called_in
from ._listener import listen, listen_asyncpg, listen_conninfo
from ._port import ClaimKey, QueuePort
from ._state import QueueBinding
from ._threads import RunLanes

__all__ = ["AsyncBackend"]


class AsyncBackend:
    """The thread lane for sync handlers, shared by one run's ports."""

    def __init__(self, handler_threads: int) -> None:
        self.lanes = RunLanes(handler_threads, 1)

    def bind(self, queue: AsyncQueue, handler: HandlerSpec) -> QueueBinding:
        store, core = queue_parts(queue)
        return QueueBinding(core, handler, AsyncQueuePort(self, store, core, handler))

    async def listen(
        self,
        port: QueuePort,
        application_name: str,
        channels: Sequence[str],
        wake: Callable[[str], None],
        on_listening: Callable[[bool], None],
    ) -> None:
        """psycopg's listener, or asyncpg's on an asyncpg engine (D1); both in _listener."""
        if isinstance(port, AsyncQueuePort) and port.asyncpg_store is not None:
            await listen_asyncpg(port.asyncpg_store, application_name, channels, wake, on_listening)
        else:
            await listen(port, application_name, channels, wake, on_listening)

    def close(self) -> None:
        self.lanes.close(db_wait=0.0)


class AsyncQueuePort:
    """A ``QueuePort`` over an ``AsyncStore``."""

    def __init__(
        self, backend: AsyncBackend, store: AsyncStore, core: QueueCore, handler: HandlerSpec
    ) -> None:
        self._backend = backend
        self._store = store
        self._core = core
        self._handler = handler
        self._claiming: Connection | None = None  # the claim's, while it runs

    @property
    def listen_group(self) -> Hashable:
        return id(self._store.engine)

    @property
    def asyncpg_store(self) -> AsyncStore | None:
        """The store, when its engine speaks asyncpg: it listens the asyncpg way (D1)."""
        return self._store if self._store.engine.dialect.driver == "asyncpg" else None

    async def claim(
        self, worker_id: str, n: int, max_batch_payload_bytes: int | None = None
    ) -> list[Job]:
        call = self._core.claim(worker_id, n, max_batch_payload_bytes)
        if call is None:
            return []

        def tracked(conn: Connection) -> list[Job]:
            # Known while it runs, so abort_claim can break it.
            self._claiming = conn
            try:
                return call(conn)
            finally:
                self._claiming = None

        return await run_call(self._store, tracked)

    def abort_claim(self) -> None:
        # Shut its socket down rather than cancel: a cancelled psycopg query
        # sends a cancel request and then waits 5 s more for the reply that
        # a silent peer never sends (asyncpg waits too).
        conn = self._claiming
        if conn is not None:
            shutdown_socket(conn)

    async def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        return await run_call(self._store, self._core.ack_claims(list(claims)))

    async def heartbeat(self, claims: Sequence[ClaimKey]) -> list[int]:
        return await run_call(self._store, self._core.heartbeat_claims(list(claims)))

    async def retry(
        self, handle: HandleCore, error: str | None, delay: float, traceback: str | None
    ) -> Retried | None:
        return await run_call(self._store, handle.retry(error, delay, traceback=traceback))

    async def fail(self, handle: HandleCore, error: str | None, traceback: str | None) -> bool:
        return await run_call(self._store, handle.fail(error, traceback=traceback))

    async def release(self, claim: ClaimKey) -> Released | None:
        return await run_call(self._store, self._core.release(*claim))

    async def sweep(self) -> SweepResult:
        return await run_call(self._store, self._core.sweep_expired(), atomic=True)

    async def record_outcomes(self, acked: int, retried: int, dead: int) -> None:
        await run_call(self._store, self._core.record_outcomes(acked, retried, dead))

    async def check_schema(self) -> None:
        await run_call(self._store, self._core.check_schema())

    async def vacuum(self, min_dead: int, live_fraction: float) -> Vacuumed:
        # No session: the store's autocommit path (VACUUM cannot run in a transaction).
        return await run_call(self._store, self._core.vacuum_jobs(min_dead, live_fraction))

    async def listen_conninfo(self, application_name: str) -> str:
        call = functools.partial(listen_conninfo, application_name=application_name)
        return await run_call(self._store, call)

    def start(
        self, handle: HandleCore, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        spec = self._handler
        if spec.is_async:
            run: Awaitable[object] = (
                _session_call(self._store, spec, handle)
                if spec.wants_session
                else spec.fn(handle.job)
            )
            if scope is not None:
                run = awaited_in(scope, run)
            started: asyncio.Future[object] = asyncio.ensure_future(run)
            return started
        # Plain sync handlers are allowed on an AsyncWorker: they get a thread.
        fn: Callable[[], object] = functools.partial(spec.fn, handle.job)
        if scope is not None:
            fn = functools.partial(called_in, scope, fn)
        return self._backend.lanes.handlers.submit(fn)

    def follow(self, result: Awaitable[object]) -> asyncio.Future[object]:
        # Awaited here on the loop (a task, so a timeout or shutdown can cancel
        # it), never on the handler thread that merely created it.
        awaited: asyncio.Future[object] = asyncio.ensure_future(result)
        return awaited


async def _session_call(store: AsyncStore, spec: HandlerSpec, handle: HandleCore) -> bool:
    """Q28: the handler's writes and the ack commit together or not at all."""
    async with AsyncSession(store.engine) as session:
        await spec.fn(handle.job, session)
        acked = await run_call(store, handle.ack(), session)
        if acked:
            await session.commit()
        else:
            await session.rollback()
        return acked
