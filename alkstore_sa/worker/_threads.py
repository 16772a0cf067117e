"""A thread pool that hands results back to the event loop in batches.

``loop.run_in_executor`` costs, per call, a ``concurrent.futures.Future``
chained to an asyncio one and one ``call_soon_threadsafe`` (a write to the
loop's self-pipe and a wake of the loop) per result.  For no-op or fast
handlers that hand-off outweighs the work, so here each thread appends its
result to a deque and only the first result since the loop last looked
schedules a delivery: a burst of results costs one wake.

Threads are started up front and are daemons: a handler that never returns
(past its job timeout or the shutdown grace) cannot keep the process alive,
and ``close()`` never waits for handlers (Python threads cannot be killed).
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Lane", "RunLanes"]

_Work = tuple[Callable[[], Any], "asyncio.Future[Any] | None"] | None


class Lane:
    """``threads`` workers running ``submit``-ted callables for one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, name: str) -> None:
        self._loop = loop
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._done: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = (
            collections.deque()
        )
        self._scheduled = False
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{i}", daemon=True)
            for i in range(max(threads, 1))
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn()`` on a thread; the future (of this loop) gets its outcome."""
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._work.put((fn, fut))
        return fut

    def submit_nowait(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on a thread; nobody waits for it (it must not raise)."""
        self._work.put((fn, None))

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            fn, fut = item
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the loop, like an executor does
                result, error = None, exc
            if fut is None:
                continue
            self._done.append((fut, result, error))
            if not self._scheduled:
                self._scheduled = True
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop closed: nobody waits for this outcome
                    return

    def _deliver(self) -> None:
        # Cleared first: a result appended from now on schedules another pass.
        self._scheduled = False
        done = self._done
        while done:
            fut, result, error = done.popleft()
            if fut.done():  # cancelled or abandoned meanwhile
                continue
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)

    def close(self, wait: float = 0.0) -> None:
        """Let idle threads end; busy ones end when their callable returns.

        ``wait``: seconds to wait for busy threads (0: do not wait).
        """
        if not self._closed:
            self._closed = True
            for _ in self._threads:
                self._work.put(None)
        if wait > 0:
            deadline = time.monotonic() + wait
            for t in self._threads:
                t.join(max(0.0, deadline - time.monotonic()))


class RunLanes:
    """A run's two shared lanes, made on first use on the running loop.

    ``handlers`` runs sync handlers; ``db`` runs the database calls that
    have no held-connection lane of their own (heartbeats, retries, fails,
    releases).  Apart, so a full handler pool never delays a heartbeat.
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

    def close(self, db_wait: float) -> None:
        # A handler past its job timeout or the shutdown grace cannot be
        # interrupted (Python threads cannot be killed); do not wait for it.
        if self._handlers is not None:
            self._handlers.close()
        if self._db is not None:
            self._db.close(wait=db_wait)
