"""How the dashboard reaches the database: one short transaction per page or action.

Every transaction starts with ``SET LOCAL statement_timeout`` (W3: 5 s), so
a slow count cannot hold a connection or a worker thread for long, and the
setting ends with the transaction (the host application's pooled
connections are never left changed).  A sync ``Store`` is driven from
Starlette's thread pool, never on the event loop; an ``AsyncStore`` on the
loop.  Reads are the store's own calls (the same calls the public methods
run) plus the dashboard's few reads (``_db/dashboard.py``), all through the
one execution path every operation takes; actions are the public
``Queue``/``AsyncQueue`` methods, given the transaction as ``session=``.

Counts are cached (``Cache``): each count is reused for a time that grows
with what it cost -- ``CACHE_FACTOR`` times its duration, at least
``CACHE_MIN`` (so the 1 s live refresh of several open pages shares one
query) and at most ``CACHE_MAX`` -- so a small queue's counts are at most
half a second old, and a queue of millions of rows is counted every few
seconds, not once per refresh of every open page.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from .._calls import Call
from .._calls.core import QueueCore
from .._db.dashboard import timeout_for_this_transaction
from ..aio import AsyncStore
from ..aio import queue_parts as async_queue_parts
from ..aio import run_call as run_async_call
from ..store import Store, run_call
from ..store import queue_parts as sync_queue_parts

__all__ = ["CACHE_MAX", "CACHE_MIN", "STATEMENT_TIMEOUT", "Cache", "Cached", "Runner"]

T = TypeVar("T")

STATEMENT_TIMEOUT = 5.0  # seconds, W3
CACHE_MIN = 0.5
CACHE_MAX = 10.0
CACHE_FACTOR = 20.0
MAX_KEYS = 1000


def _timed(conn: Connection) -> None:
    timeout_for_this_transaction(conn, STATEMENT_TIMEOUT)


class Runner:
    """Runs the dashboard's reads and actions on a ``Store`` or an ``AsyncStore``."""

    def __init__(self, store: Store | AsyncStore) -> None:
        if not isinstance(store, Store | AsyncStore):
            raise TypeError(
                f"create_app takes a Store or an AsyncStore, got {type(store).__name__}"
            )
        self.store = store

    @property
    def schema(self) -> str:
        return self.store.schema

    def queue_core(self, name: str) -> QueueCore:
        """The calls of queue ``name`` (validates the name: ``InvalidNameError``)."""
        store = self.store
        if isinstance(store, Store):
            return sync_queue_parts(store.queue(name))[1]
        return async_queue_parts(store.queue(name))[1]

    async def read(self, call: Call[T]) -> T:
        """``call`` (a function of a sync ``Connection``) in a timed transaction of its own."""
        store = self.store
        if isinstance(store, Store):
            return await run_in_threadpool(self._sync_tx, lambda conn: run_call(store, call, conn))
        async with store.engine.begin() as aconn:
            await aconn.run_sync(_timed)
            return await run_async_call(store, call, aconn)

    async def act(self, queue: str, op: Callable[[Any, Any], Any]) -> Any:
        """``op(queue handle, session)``: a public queue method, in a timed transaction."""
        store = self.store
        if isinstance(store, Store):
            return await run_in_threadpool(self._sync_tx, lambda conn: op(store.queue(queue), conn))
        async with store.engine.begin() as aconn:
            await aconn.run_sync(_timed)
            result = op(store.queue(queue), aconn)
            return await result if inspect.isawaitable(result) else result

    def _sync_tx(self, fn: Callable[[Connection], T]) -> T:
        assert isinstance(self.store, Store)
        with self.store.engine.begin() as conn:
            _timed(conn)
            return fn(conn)


@dataclass(frozen=True, slots=True)
class Cached(Generic[T]):
    """A cached value and what the page says about it."""

    value: T
    read_at: float  # time.monotonic() when it was read
    took: float  # seconds the read took
    ttl: float  # seconds it is reused for

    @property
    def age(self) -> float:
        return max(time.monotonic() - self.read_at, 0.0)


class Cache:
    """Reuses each count for a time proportional to its cost (see the module's doc)."""

    def __init__(self) -> None:
        self._entries: dict[object, Cached[Any]] = {}
        self._locks: dict[object, asyncio.Lock] = {}

    async def get(self, key: object, read: Callable[[], Awaitable[T]]) -> Cached[T]:
        if len(self._locks) > MAX_KEYS:  # keys come from URLs: never let them pile up
            self._entries.clear()
            self._locks.clear()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # concurrent refreshes of one key share one query
            entry = self._entries.get(key)
            if entry is not None and entry.age < entry.ttl:
                return entry
            started = time.monotonic()
            value = await read()
            took = time.monotonic() - started
            ttl = min(max(took * CACHE_FACTOR, CACHE_MIN), CACHE_MAX)
            fresh = Cached(value, time.monotonic(), took, ttl)
            self._entries[key] = fresh
            return fresh

    def forget(self) -> None:
        """After an action: the next page shows its effect at once."""
        self._entries.clear()
