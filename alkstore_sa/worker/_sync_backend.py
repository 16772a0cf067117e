"""The ``Worker``'s backend: queue ports over a sync ``Store``, calls on threads.

Each database call runs through the sync store exactly as the sync API runs
it (``store.run_call``), on a thread, so the event loop never blocks.
Claims, and acks when the pool is big enough, have a thread of their own
that keeps one autocommit connection checked out (``_HeldConnections``);
everything else goes through the run's shared database lane.  Handlers run
on the run's handler lane; a session-scoped one gets a ``Session`` whose
transaction also acks its job (Q28).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from .._calls.core import Call, HandleCore, QueueCore
from .._db.ops import Released, Retried, Vacuumed
from .._db.owned import drop_if_read_only
from .._db.sa_internals import pool_capacity
from .._db.sockets import shutdown_socket
from .._values.job import Job, SweepResult
from ..store import Queue, Store, queue_parts, run_call
from ._handlers import HandlerSpec, called_in, returned_awaitable
from ._listener import listen, listen_conninfo
from ._port import ClaimKey
from ._state import QueueBinding
from ._threads import Lane, RunLanes

__all__ = ["SyncBackend"]

log = logging.getLogger("alkstore_sa.worker")

T = TypeVar("T")
# At the end of a run, how long to wait for DB calls still on their threads.
DB_CLOSE_WAIT = 10.0
# Acks hold a connection of their own only when the pool has this many: a
# small pool (smaller than the handlers' needs) keeps them on the shared
# lane so session handlers and heartbeats are never starved of connections.
HOLD_ACKS_MIN_POOL = 6


class _HeldConnections:
    """One autocommit connection per store, kept by one hot-path thread.

    Claims are the hot path (one per wake, one per ``concurrency`` jobs of a
    backlog): checking a connection out of the pool for each costs an
    isolation-level switch there and back, plus a ping with
    ``pool_pre_ping``.  Claims skip locked rows, so this connection never
    waits on another transaction (acks only wait on a row some other
    transaction locked, and then only acks wait).  Any error drops it (back
    to the pool, or invalidated when it answered read-only: 25006); the next
    call checks out a fresh one.  Only its thread
    uses it.
    """

    def __init__(self) -> None:
        self._conns: dict[int, Connection] = {}
        self._busy: Connection | None = None  # the one a call runs on now, if any

    def run(self, store: Store, call: Call[T]) -> T:
        conn = self._conns.get(id(store))
        if conn is None:
            conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conns[id(store)] = conn
        self._busy = conn
        try:
            return run_call(store, call, conn)
        except BaseException as exc:
            drop_if_read_only(conn, exc)  # 25006: never back into the pool
            self._drop(id(store))
            raise
        finally:
            self._busy = None

    def abort(self) -> None:
        """Break the connection a call is blocked on (from any thread).

        A peer that went silent without a reset (a blackholed network path,
        a frozen server whose kernel still acknowledges) leaves libpq
        waiting for a reply forever, and this lane's thread with it.
        Shutting the socket down makes that wait end in a connection
        error on the lane's thread, which then drops the connection.
        """
        conn = self._busy
        if conn is not None:
            shutdown_socket(conn)

    def _drop(self, key: int) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken: the pool discards it
                log.debug("closing a held connection failed", exc_info=True)

    def close(self) -> None:
        for key in list(self._conns):
            self._drop(key)


class _HotLane:
    """One thread and its held connections: for one kind of hot-path call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._held = _HeldConnections()
        self._lane: Lane | None = None

    async def run(self, store: Store, call: Call[T]) -> T:
        if self._lane is None:
            self._lane = Lane(asyncio.get_running_loop(), 1, self._name)
        fut = self._lane.submit(functools.partial(self._held.run, store, call))
        try:
            result: T = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The caller gave up (a claim past its timeout, or the run
            # stopping): the thread may be blocked on a silent peer, and every
            # later call on this lane would queue behind it.  Break its
            # connection so the thread comes back.
            if not fut.done():
                self._held.abort()
            raise
        return result

    def abort(self) -> None:
        """Break the connection the lane's call is blocked on, if any."""
        self._held.abort()

    def close(self) -> None:
        if self._lane is not None:
            # The held connections go back to the pool on the lane's thread,
            # after any call still running there.
            self._lane.submit_nowait(self._held.close)
            self._lane.close(wait=DB_CLOSE_WAIT)


class SyncBackend:
    """Threads and held connections shared by one run's ports."""

    def __init__(self, handler_threads: int, db_threads: int) -> None:
        self.lanes = RunLanes(handler_threads, db_threads)
        self.claims = _HotLane("alkstore-claim")
        self.acks = _HotLane("alkstore-ack")

    def bind(self, queue: Queue, handler: HandlerSpec) -> QueueBinding:
        store, core = queue_parts(queue)
        return QueueBinding(core, handler, SyncQueuePort(self, store, core, handler))

    async def run(self, store: Store, call: Call[T]) -> T:
        result: T = await self.lanes.db.submit(functools.partial(run_call, store, call))
        return result

    listen = staticmethod(listen)  # the one implementation, in _listener

    def close(self) -> None:
        self.lanes.close(db_wait=DB_CLOSE_WAIT)
        self.claims.close()
        self.acks.close()


class SyncQueuePort:
    """A ``QueuePort`` over a sync ``Store``."""

    def __init__(
        self, backend: SyncBackend, store: Store, core: QueueCore, handler: HandlerSpec
    ) -> None:
        self._backend = backend
        self._store = store
        self._core = core
        self._handler = handler
        self._hold_acks = pool_capacity(store.engine) >= HOLD_ACKS_MIN_POOL

    @property
    def listen_group(self) -> Hashable:
        return id(self._store.engine)

    async def claim(
        self, worker_id: str, n: int, max_batch_payload_bytes: int | None = None
    ) -> list[Job]:
        call = self._core.claim(worker_id, n, max_batch_payload_bytes)
        return [] if call is None else await self._backend.claims.run(self._store, call)

    def abort_claim(self) -> None:
        self._backend.claims.abort()

    async def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        call = self._core.ack_claims(list(claims))
        if self._hold_acks:
            return await self._backend.acks.run(self._store, call)
        return await self._backend.run(self._store, call)

    async def heartbeat(self, claims: Sequence[ClaimKey]) -> list[int]:
        return await self._backend.run(self._store, self._core.heartbeat_claims(list(claims)))

    async def retry(
        self, handle: HandleCore, error: str | None, delay: float, traceback: str | None
    ) -> Retried | None:
        return await self._backend.run(self._store, handle.retry(error, delay, traceback=traceback))

    async def fail(self, handle: HandleCore, error: str | None, traceback: str | None) -> bool:
        return await self._backend.run(self._store, handle.fail(error, traceback=traceback))

    async def release(self, claim: ClaimKey) -> Released | None:
        return await self._backend.run(self._store, self._core.release(*claim))

    async def sweep(self) -> SweepResult:
        call = functools.partial(run_call, self._store, self._core.sweep_expired(), atomic=True)
        result: SweepResult = await self._backend.lanes.db.submit(call)
        return result

    async def record_outcomes(self, acked: int, retried: int, dead: int) -> None:
        await self._backend.run(self._store, self._core.record_outcomes(acked, retried, dead))

    async def check_schema(self) -> None:
        await self._backend.run(self._store, self._core.check_schema())

    async def vacuum(self, min_dead: int, live_fraction: float) -> Vacuumed:
        # The shared lane's calls run on the store's autocommit path (VACUUM
        # cannot run in a transaction).
        return await self._backend.run(self._store, self._core.vacuum_jobs(min_dead, live_fraction))

    async def listen_conninfo(self, application_name: str) -> str:
        call = functools.partial(listen_conninfo, application_name=application_name)
        return await self._backend.run(self._store, call)

    def start(
        self, handle: HandleCore, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        fn: Callable[[], object]
        if self._handler.wants_session:
            fn = functools.partial(_session_call, self._store, self._handler, handle)
        else:
            fn = functools.partial(self._handler.fn, handle.job)
        if scope is not None:
            fn = functools.partial(called_in, scope, fn)
        return self._backend.lanes.handlers.submit(fn)

    def follow(self, result: Awaitable[object]) -> asyncio.Future[object]:
        # No loop of the handler's own to run it on: a failed attempt, retried.
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_exception(returned_awaitable(self._handler, result))
        return fut


def _session_call(store: Store, spec: HandlerSpec, handle: HandleCore) -> bool:
    """Q28: the handler's writes and the ack commit together or not at all."""
    with Session(store.engine) as session:
        result = spec.fn(handle.job, session)
        if inspect.isawaitable(result):
            # Its body never ran: no ack (the session rolls back on the way out).
            raise returned_awaitable(spec, result)
        acked = run_call(store, handle.ack(), session)
        if acked:
            session.commit()
        else:
            session.rollback()  # the claim was lost: undo the handler's writes
        return acked
