"""R3: waiting for a job to finish -- one LISTEN connection per store, shared by every waiter.

A waiter re-reads its job (``get_job``) when the store's done channel is
notified (``StoreAddress.done_channel``: sent only by acks that keep a
result and by deaths, once per statement), and at least every
``POLL_INTERVAL`` seconds whatever happens, so a lost LISTEN connection
delays it by at most that.  However many waiters a store has (threads of
a ``Store``, tasks of an ``AsyncStore``), they share one listener: the
first to start waiting opens it, the last to stop closes it, so a wait
that times out leaves no connection behind.

The listener is the worker's own (``worker._listener``): the same
dedicated, reconnecting connection, psycopg's or asyncpg's (D1).  A sync
store's listener runs on a loop in a daemon thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._values.job import Job

if TYPE_CHECKING:
    from ..aio import AsyncQueue, AsyncStore
    from ..store import Queue, Store

__all__ = ["POLL_INTERVAL", "wait_async", "wait_sync"]

# R3: the longest a waiter goes without re-reading its job.
POLL_INTERVAL = 1.0
APPLICATION_NAME = "alkstore wait"
FINAL = ("completed", "dead")


def _final(job: Job | None) -> bool:
    return job is None or job.status in FINAL


class _ConninfoPort:
    """What ``worker._listener.listen`` asks of a port: where to connect."""

    def __init__(self, conninfo: Callable[[str], Awaitable[str]]) -> None:
        self.listen_conninfo = conninfo


async def _listen(store: Store | AsyncStore, channel: str, wake: Callable[[], None]) -> None:
    """LISTEN on ``channel`` until cancelled; ``wake()`` on each notification and (re)LISTEN."""
    from ..aio import AsyncStore, run_call
    from ..store import run_call as run_sync_call
    from ..worker._listener import NO_RECOVERY, listen, listen_asyncpg, listen_conninfo

    def on_listening(up: bool) -> None:
        if up:
            wake()  # notifications sent while it was down are lost: re-read now

    def woke(_channel: str, _payload: str = "") -> None:
        wake()

    if isinstance(store, AsyncStore):
        if store.engine.dialect.driver == "asyncpg":
            await listen_asyncpg(
                store, APPLICATION_NAME, [channel], woke, on_listening, NO_RECOVERY
            )
            return
        astore = store

        async def conninfo(name: str) -> str:
            return await run_call(astore, functools.partial(listen_conninfo, application_name=name))

    else:
        sstore = store

        async def conninfo(name: str) -> str:
            call = functools.partial(listen_conninfo, application_name=name)
            return await asyncio.to_thread(run_sync_call, sstore, call)

    port: Any = _ConninfoPort(conninfo)
    await listen(port, APPLICATION_NAME, [channel], woke, on_listening, NO_RECOVERY)


# -- the async face ---------------------------------------------------------------


class _AsyncHub:
    """One store's waiters on one loop, and the listener task they share."""

    def __init__(self, store: AsyncStore, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._events: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None

    def enter(self) -> asyncio.Event:
        event = asyncio.Event()
        self._events.add(event)
        if self._task is None:
            self._task = asyncio.ensure_future(_listen(self._store, self._channel, self._wake))
        return event

    def _wake(self) -> None:
        for event in self._events:
            event.set()

    async def leave(self, event: asyncio.Event) -> None:
        self._events.discard(event)
        if not self._events and self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            # Its connection is closed before the wait returns; cancelled, or
            # the listener had failed: gone either way.
            with contextlib.suppress(BaseException):
                await task


_async_hubs: dict[tuple[int, int], _AsyncHub] = {}


async def wait_async(queue: AsyncQueue, job_id: int, timeout: float | None) -> Job | None:
    """R3 for an ``AsyncQueue``: the final ``Job``, None when nothing is kept, or TimeoutError."""
    store = queue.store
    loop = asyncio.get_running_loop()
    key = (id(store), id(loop))
    hub = _async_hubs.get(key)
    if hub is None:
        hub = _async_hubs[key] = _AsyncHub(store, _channel(store.schema))
    deadline = None if timeout is None else loop.time() + timeout
    event = hub.enter()
    try:
        while True:
            job = await queue.get_job(job_id)
            if _final(job):
                return job
            left = POLL_INTERVAL if deadline is None else min(POLL_INTERVAL, deadline - loop.time())
            if left <= 0:
                raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)
            event.clear()
    finally:
        await hub.leave(event)
        if not hub._events and _async_hubs.get(key) is hub:
            del _async_hubs[key]


# -- the sync face ------------------------------------------------------------------


class _SyncHub:
    """One store's waiting threads and the listener thread they share."""

    def __init__(self, store: Store, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._lock = threading.Lock()
        self._events: set[threading.Event] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._listener: asyncio.Future[None] | None = None  # made on the hub's loop

    def enter(self) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events.add(event)
            if self._thread is None:
                self._start()
        return event

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        thread = threading.Thread(
            target=self._serve, args=(loop,), daemon=True, name="alkstore-wait"
        )
        self._thread = thread
        thread.start()
        self._task = asyncio.run_coroutine_threadsafe(self._spawn(), loop)

    async def _spawn(self) -> None:
        self._listener = asyncio.ensure_future(_listen(self._store, self._channel, self._wake))

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _wake(self) -> None:
        with self._lock:
            events = list(self._events)
        for event in events:
            event.set()

    def leave(self, event: threading.Event) -> None:
        with self._lock:
            self._events.discard(event)
            if self._events or self._thread is None:
                return
            loop, thread, spawned = self._loop, self._thread, self._task
            self._loop = self._thread = self._task = None
        assert loop is not None and spawned is not None
        spawned.result(timeout=5)  # the listener task exists
        listener = self._listener
        assert listener is not None

        async def stop(listener: asyncio.Future[None]) -> None:
            listener.cancel()
            with contextlib.suppress(BaseException):  # cancelled, or it had failed
                await listener  # its connection is closed before the wait returns

        try:
            asyncio.run_coroutine_threadsafe(stop(listener), loop).result(timeout=5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)


_sync_hubs: dict[int, _SyncHub] = {}
_sync_hubs_lock = threading.Lock()


def wait_sync(queue: Queue, job_id: int, timeout: float | None) -> Job | None:
    """R3 for a ``Queue``: the final ``Job``, None when nothing is kept, or TimeoutError."""
    store = queue.store
    with _sync_hubs_lock:
        hub = _sync_hubs.get(id(store))
        if hub is None:
            hub = _sync_hubs[id(store)] = _SyncHub(store, _channel(store.schema))
    deadline = None if timeout is None else time.monotonic() + timeout
    event = hub.enter()
    try:
        while True:
            job = queue.get_job(job_id)
            if _final(job):
                return job
            now = time.monotonic()
            left = POLL_INTERVAL if deadline is None else min(POLL_INTERVAL, deadline - now)
            if left <= 0:
                raise TimeoutError(f"job {job_id} did not finish within {timeout:g}s")
            event.wait(left)
            event.clear()
    finally:
        hub.leave(event)


def _channel(schema: str) -> str:
    from .._db.address import StoreAddress

    return StoreAddress(schema).done_channel
