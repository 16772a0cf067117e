"""A claim's first handlers started where its reply lands (L1's wake path).

A ``Worker``'s claim runs on a thread of its own.  Going back to the event
loop first -- the thread hands the reply over, the loop wakes, the producer
resumes and starts each job, and only then does a handler thread run --
cost ~0.15 ms of a wake's ~1.6 ms.  ``Executor.early_start`` makes one of
these for a claim about to go out, sized to the slots free then; the port
calls it with the reply on the thread that received it, and it starts those
handlers there.  The producer then ``close()``s it on the loop and holds
what it started like any other job (``Executor.adopt``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from .._values.job import Job
from ._state import Slot

__all__ = ["EarlyStart"]


class EarlyStart:
    """Starts the handlers of a claim's first ``room`` jobs wherever its reply lands.

    Called with the claimed jobs by the port (``QueuePort.claim``'s
    ``on_reply``), on the claim's thread or on the loop; ``close()`` (on the
    loop, once the claim is over, whether it returned or raised) hands back
    what it started and makes any later call start nothing.  A run that is
    stopping starts nothing here (Q27): those jobs go back unstarted.
    """

    def __init__(self, begin: Callable[[Slot], None], stopping: asyncio.Event, room: int) -> None:
        self._begin = begin
        self._stopping = stopping
        self._room = room
        self._started: list[Slot] = []
        self._closed = False
        self._lock = threading.Lock()

    def __call__(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            if self._closed:
                return
            for job in jobs[: self._room]:
                if self._stopping.is_set():  # a plain flag: read from any thread
                    break
                slot = Slot(job)
                self._begin(slot)
                self._started.append(slot)

    def close(self) -> list[Slot]:
        """The slots started, in claim order; nothing starts after this."""
        with self._lock:
            self._closed = True
            return self._started
