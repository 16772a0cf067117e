"""One rule test, both APIs: a thin adapter that makes AsyncStore look sync.

The async store lives on an event loop in a background thread; every
coroutine method of ``AsyncStore``/``AsyncQueue``/``AsyncJobHandle`` is run
there and waited for.  Tests call ``qs.queue("x").enqueue(b"")`` alike for
both, and threads calling concurrently get concurrent asyncio tasks, each on
its own connection.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

from alkstore_sa import AsyncJobHandle, AsyncQueue, AsyncStore


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


_WRAPPED = (AsyncStore, AsyncQueue, AsyncJobHandle)


class SyncView:
    """Presents an async object's coroutine methods as blocking calls."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    @property
    def wrapped(self) -> Any:
        return self._target

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, _WRAPPED):
            return SyncView(value, self._loop)
        if isinstance(value, list):
            return [self._wrap(v) for v in value]
        return value

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):

            def blocking(*args: Any, **kwargs: Any) -> Any:
                return self._wrap(self._loop.run(attr(*args, **kwargs)))

            return blocking
        if callable(attr):

            def plain(*args: Any, **kwargs: Any) -> Any:
                return self._wrap(attr(*args, **kwargs))

            return plain
        return self._wrap(attr)

    def __repr__(self) -> str:
        return f"SyncView({self._target!r})"
