"""Where the optional instrumentation extras plug in (B3 OpenTelemetry, B4 Prometheus).

The core never imports an extra.  An extra subclasses ``Observer``,
overriding the hooks it needs, and ``install``s an instance
(``alkstore_sa.otel.instrument()``, ``alkstore_sa.prometheus.instrument()``).
The enqueue path reads the installed observers when it builds a call, and a
worker run reads them once when it starts; with none installed each pays
one check of an empty tuple.

Hooks run on the caller's or the worker's hot path: they must be cheap and
must not raise (the worker guards its calls anyway, see ``notify``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Literal

from sqlalchemy import Connection

from .._values.job import Job

__all__ = [
    "Carrier",
    "Observer",
    "Outcome",
    "Send",
    "install",
    "installed",
    "notify",
    "queue_time",
    "uninstall",
]

log = logging.getLogger("alkstore_sa.instrument")

# What became of one handler run: the ``alkstore.outcome`` of B3, the
# ``outcome`` label of B4.
Outcome = Literal["acked", "retried", "dead", "lost", "snoozed", "cancelled"]

# Filled by an observer while an enqueue runs; stored with the job as its
# ``trace_context`` when not empty (B3).
Carrier = dict[str, str]
# An enqueue, given the connection and the carrier to store: the new ids.
Send = Callable[[Connection, Carrier], list[int]]


class Observer:
    """Every hook, as a no-op: an extra overrides the ones it needs."""

    def wrap_enqueue(self, queue: str, count: int, send: Send) -> Send:
        """Called where an enqueue call is built: in the caller's thread and
        context (its current span), before any SQL.  Returns what runs in
        ``send``'s place when the call runs (possibly on another thread or
        greenlet, so capture the context here)."""
        return send

    def claimed(self, queue: str, jobs: Sequence[Job]) -> None:
        """A worker claimed ``jobs`` (not empty) from ``queue``."""

    def handler_scope(self, job: Job) -> AbstractContextManager[object] | None:
        """Entered around the handler's run, in its thread or task; None for none."""
        return None

    def finished(self, queue: str, job: Job, outcome: Outcome, duration: float | None) -> None:
        """A handler run's outcome is known; ``duration``: its run in seconds
        (None when it never returned: a timeout, a lost claim at shutdown)."""


_lock = threading.Lock()
_installed: tuple[Observer, ...] = ()


def install(observer: Observer) -> None:
    """Add ``observer`` (once; installing it again changes nothing)."""
    global _installed
    with _lock:
        if observer not in _installed:
            _installed = (*_installed, observer)


def uninstall(observer: Observer) -> None:
    """Remove ``observer`` if installed; runs already started keep it."""
    global _installed
    with _lock:
        _installed = tuple(o for o in _installed if o is not observer)


def installed() -> tuple[Observer, ...]:
    return _installed


def queue_time(job: Job) -> float | None:
    """Seconds from ``job.run_at`` to its claim, on the database's clock (B3, B4).

    A claim sets ``claim_deadline = now + visibility_timeout``, so the claim
    time is read back from the claimed row; None for a row not claimed.
    """
    deadline = job.claim_deadline
    if deadline is None:
        return None
    waited = (deadline - job.run_at).total_seconds() - job.visibility_timeout
    return waited if waited > 0.0 else 0.0


def notify(hook: Callable[[], object], what: str) -> None:
    """Run one observer hook; an error there is logged, never the worker's problem."""
    try:
        hook()
    except Exception:
        log.warning("instrumentation hook %s failed", what, exc_info=True)
