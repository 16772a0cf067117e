"""An asyncio event loop whose clock is virtual: time passes only when the loop is idle.

The worker runtime reads time from its event loop (``loop.time()``,
``asyncio.sleep``, ``wait_for`` timeouts).  On this loop, whenever nothing
is ready to run and the loop would sleep until its next timer, the clock
jumps to that timer instead: a run that "waits" 30 s for a shutdown grace
takes microseconds, and every timing decision is deterministic.

Nothing may run on other threads meanwhile (they would race the jumps):
use it with the fake backend (``_fakebackend``), whose database and
handlers live on the loop.  A loop with nothing scheduled at all would
wait forever: that raises ``Deadlock`` instead of hanging the test.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class Deadlock(RuntimeError):
    """The loop had no timer and no ready callback: it would have waited forever."""


class _JumpingSelector(selectors.BaseSelector):
    """A real selector that, when nothing is ready, advances the clock instead of sleeping."""

    def __init__(self, loop: FakeClockLoop) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready:
            return ready
        if timeout is None:
            raise Deadlock("the event loop has nothing scheduled: it would wait forever")
        self._loop.advance(timeout)
        return []


class FakeClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(seconds, 0.0)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh fake-clock loop."""
    loop = FakeClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
