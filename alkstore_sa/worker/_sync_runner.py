"""The sync runner: a ``StorePort``'s calls through a ``Store``, on threads.

Each database call runs through the sync store exactly as the sync API runs
it (``store.run_call``), on a thread, so the event loop never blocks.
Claims, and acks when the pool is big enough, have a thread of their own
that keeps one autocommit connection checked out (``_HeldConnections``);
everything else goes through the run's shared database lane.  Handlers run
on the run's handler lane; a session-scoped one gets a ``Session`` whose
transaction also acks its job (Q28).

``SyncLanes.inline()`` runs all of it in the calling thread instead, one
call at a time: ``alkstore_sa.testing.run_due`` drives the worker's own
executor that way.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from .._calls import Call
from .._calls.core import QueueCore
from .._db.owned import drop_if_read_only
from .._db.sa_internals import pool_capacity
from .._db.sockets import shutdown_socket
from .._values.job import Job
from ..store import Store, run_call
from ._handlers import HandlerSpec, Scope, returned_awaitable, scoped
from ._pool import HandlerPool
from ._threads import Lane, RunLanes

__all__ = ["DB_CLOSE_WAIT", "SyncLanes", "SyncRunner", "session_ack"]

log = logging.getLogger("alkstore_sa.worker")

T = TypeVar("T")
Started = asyncio.Future[object]
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

    def run(self, store: Store, call: Call[T], on_reply: Callable[[T], None] | None = None) -> T:
        conn = self._conns.get(id(store))
        if conn is None:
            conn = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conns[id(store)] = conn
        self._busy = conn
        try:
            result = run_call(store, call, conn)
        except BaseException as exc:
            drop_if_read_only(conn, exc)  # 25006: never back into the pool
            self._drop(id(store))
            raise
        finally:
            self._busy = None
        if on_reply is not None:
            on_reply(result)
        return result

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

    async def run(
        self, store: Store, call: Call[T], on_reply: Callable[[T], None] | None = None
    ) -> T:
        """``call`` on the lane's thread; ``on_reply(result)`` there too, once it returned."""
        if self._lane is None:
            self._lane = Lane(asyncio.get_running_loop(), 1, self._name)
        fut = self._lane.submit(functools.partial(self._held.run, store, call, on_reply))
        try:
            # Not shielded: a cancel cancels the lane's future too, and the
            # thread's outcome is then dropped (``Lane`` skips done futures).
            result: T = await fut
        except asyncio.CancelledError:
            # The caller gave up (a claim past its timeout, or the run
            # stopping): the thread may be blocked on a silent peer, and every
            # later call on this lane would queue behind it.  Break its
            # connection so the thread comes back (nothing to break when
            # no call is on the wire).
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


class _Submit(Protocol):
    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]: ...


class _Hot(Protocol):
    async def run(
        self, store: Store, call: Call[T], on_reply: Callable[[T], None] | None = None
    ) -> T: ...

    def abort(self) -> None: ...


class _Inline:
    """``submit``/``run`` in the calling thread, at once (``SyncLanes.inline``)."""

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(fn())
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    async def run(
        self, store: Store, call: Call[T], on_reply: Callable[[T], None] | None = None
    ) -> T:
        result = run_call(store, call)
        if on_reply is not None:
            on_reply(result)
        return result

    def abort(self) -> None:
        pass  # nothing runs beside the caller: nothing to break


class SyncLanes:
    """Where a sync runner's calls run: shared by every sync runner of a run."""

    def __init__(self, runs: RunLanes | None) -> None:
        self._runs = runs
        self._inline = _Inline() if runs is None else None
        self.claims: _Hot = self._inline or _HotLane("alkstore-claim")
        self.acks: _Hot = self._inline or _HotLane("alkstore-ack")

    @classmethod
    def inline(cls) -> SyncLanes:
        return cls(None)

    @property
    def db(self) -> _Submit:
        return self._inline or self._lanes.db

    @property
    def handlers(self) -> _Submit:
        return self._inline or self._lanes.handlers

    def make_handlers(self) -> None:
        """Make the handlers' lane now, if it is not made yet (it needs the running loop)."""
        if self._runs is not None:
            _ = self._runs.handlers  # the property makes it

    @property
    def _lanes(self) -> RunLanes:
        assert self._runs is not None
        return self._runs

    def close(self) -> None:
        for hot in (self.claims, self.acks):
            if isinstance(hot, _HotLane):
                hot.close()


class SyncRunner:
    """The runner of a ``StorePort`` over a sync ``Store``."""

    def __init__(self, store: Store, lanes: SyncLanes, pool: HandlerPool | None = None) -> None:
        self._store = store
        self._lanes = lanes
        self._pool = pool  # X2: handlers run in the worker's handler_executor
        self._hold_acks = pool_capacity(store.engine) >= HOLD_ACKS_MIN_POOL

    @property
    def engine(self) -> Engine:
        return self._store.engine

    @property
    def asyncpg_store(self) -> None:
        return None  # a sync store's engine is psycopg's (D1 is async only)

    async def run(self, call: Call[T], *, atomic: bool = False) -> T:
        fn = functools.partial(run_call, self._store, call, atomic=atomic)
        result: T = await self._lanes.db.submit(fn)
        return result

    async def claim(self, call: Call[T], on_reply: Callable[[T], None] | None = None) -> T:
        if on_reply is None or self._pool is not None:
            # A process pool's ``run`` wraps futures for the running loop: on the loop.
            result = await self._lanes.claims.run(self._store, call)
            if on_reply is not None:
                on_reply(result)
            return result
        self._lanes.make_handlers()  # on the loop: ``on_reply`` submits to it off the loop
        return await self._lanes.claims.run(self._store, call, on_reply)

    def abort_claim(self) -> None:
        self._lanes.claims.abort()

    async def ack(self, call: Call[T]) -> T:
        if self._hold_acks:
            return await self._lanes.acks.run(self._store, call)
        return await self.run(call)

    def start(self, spec: HandlerSpec, core: QueueCore, job: Job, scope: Scope) -> Started:
        handlers: _Submit = self._lanes.handlers if self._pool is None else self._pool
        if spec.wants_session:  # never with a process pool (refused when it was built)
            return handlers.submit(
                scoped(functools.partial(_session_call, self._store, spec, core, job), scope)
            )
        if self._pool is not None:
            return self._pool.run(spec.fn, job, scope)
        return handlers.submit(scoped(functools.partial(spec.fn, job), scope))

    def follow(self, spec: HandlerSpec, result: Awaitable[object]) -> Started:
        # No loop of the handler's own to run it on: a failed attempt, retried.
        fut: Started = asyncio.get_running_loop().create_future()
        fut.set_exception(returned_awaitable(spec, result))
        return fut


def session_ack(core: QueueCore, job: Job, result: object) -> Call[bool]:
    """The session's ack; R1/R2: a kept job moves with the handler's bytes (or None)."""
    if job.keep_completed is None:
        return core.ack_claim(job.id, job.attempts)
    if result is not None and not isinstance(result, bytes | bytearray | memoryview):
        raise TypeError(
            f"handler returned a {type(result).__name__}; a job that keeps its "
            "result takes bytes or None"
        )
    data = None if result is None else bytes(result)
    return core.ack_claim(job.id, job.attempts, kept=True, result=data)


def _session_call(store: Store, spec: HandlerSpec, core: QueueCore, job: Job) -> bool:
    """Q28: the handler's writes and the ack commit together or not at all."""
    with Session(store.engine) as session:
        result = spec.fn(job, session)
        if inspect.isawaitable(result):
            # Its body never ran: no ack (the session rolls back on the way out).
            raise returned_awaitable(spec, result)
        acked = run_call(store, session_ack(core, job, result), session)
        if acked:
            session.commit()
        else:
            session.rollback()  # the claim was lost: undo the handler's writes
        return acked
