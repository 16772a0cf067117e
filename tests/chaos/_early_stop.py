"""SIGTERM in a chaos worker process before its ``run()`` has its own handler.

The harness stops a just-respawned worker at once when its queue empties,
so SIGTERM may land while the process is still importing or starting.
``sys.exit`` from a handler raises wherever the main thread happens to be
-- inside ``threading.Thread.start``, say (then "release unlocked lock",
exit 1) -- so the handler here only remembers the signal, and ``hand_to``
turns it into ``worker.stop()``: a worker told to stop before it started
stops as soon as it starts, with nothing in flight, and exits 0 like any
graceful stop.  ``run()`` installs its own handler while it runs and puts
``hand_to``'s back on return.
"""

from __future__ import annotations

import signal
from typing import Any, Protocol


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_early: list[int] = []


def _remember(signum: int, _frame: Any) -> None:
    _early.append(signum)


def install() -> None:
    """First thing in the process: a SIGTERM from now on is remembered."""
    signal.signal(signal.SIGTERM, _remember)


def hand_to(worker: _Stoppable) -> None:
    """SIGTERM stops ``worker`` from now on; one that came earlier stops it now."""
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    if _early:
        worker.stop()
