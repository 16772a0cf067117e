"""Cancelling running work (C1): ``job_cancelled()``, and the worker side of ``cancel()``.

``cancel(job_id)`` deletes the row (Q23) and, when it was claimed, names it
on the store's control channel (``cancel:<id>,...``, sent at commit).  The
listener routes that notification here (``Cancels.notified``); with LISTEN
down, the heartbeat that no longer extends a claim asks whether its job
still has a row anywhere, and a job with none is cancelled the same way
(``Cancels.cancel``).  What happens to a held job the worker is told of:

- claimed ahead, not started: dropped from ``ready`` unrun;
- running an async handler: its task is cancelled (``CancelledError``);
- running a sync handler: ``job_cancelled()`` turns True in it (a thread
  cannot be stopped: it keeps its slot until it returns);
- its outcome already being recorded: whichever committed first wins (an
  ack the database refuses is reported as cancelled, not lost).

Either way the outcome is ``cancelled`` (``_outcomes``): nothing is acked,
retried or failed for it, and a session-scoped handler's session rolls
back (its ack finds no row).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from contextvars import ContextVar, Token
from typing import Protocol

from ._outcomes import Reports
from ._state import QueueState, RunState, Slot

__all__ = ["PREFIX", "Cancels", "Running", "job_cancelled"]

log = logging.getLogger("alkstore_sa.worker")

PREFIX = "cancel:"  # the control channel's cancel messages: ``cancel:<id>,<id>...``
# How long a notified id is remembered for a claim whose reply was still on its
# way (committed before the cancel, held after it): far longer than any claim.
REMEMBERED_FOR = 60.0


class _Cancellable(Protocol):
    cancelled: bool


_running: ContextVar[_Cancellable | None] = ContextVar("alkstore_running_job", default=None)


def job_cancelled() -> bool:
    """C1: True inside a handler whose job was cancelled while it ran; False otherwise.

    A sync handler cannot be interrupted: a long one checks this now and then
    and returns (or raises) when it turns True.  Its outcome is ``cancelled``
    whatever it returns: nothing is acked, and a session-scoped handler's
    writes roll back.  Outside a handler (or in a ``handler_executor``'s
    child process) it is always False.
    """
    job = _running.get()
    return job is not None and job.cancelled


class Running:
    """The scope a handler runs in (its thread or task): ``job_cancelled()`` reads ``slot``."""

    __slots__ = ("_slot", "_token")

    def __init__(self, slot: _Cancellable) -> None:
        self._slot = slot
        self._token: Token[_Cancellable | None] | None = None

    def __enter__(self) -> None:
        self._token = _running.set(self._slot)

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            # A coroutine closed outside its task (never resumed) exits in another
            # context, whose variable this never set: nothing to undo there.
            with contextlib.suppress(ValueError):
                _running.reset(token)


def cancel_ids(payload: str) -> set[int]:
    """The job ids of a control channel message; empty for anything else."""
    if not payload.startswith(PREFIX):
        return set()
    ids = set()
    for part in payload[len(PREFIX) :].split(","):
        if part.strip().isdigit():
            ids.add(int(part))
    return ids


class Cancels:
    """Stops the held jobs a run is told were cancelled."""

    def __init__(self, run: RunState, reports: Reports) -> None:
        self._run = run
        self._reports = reports
        self._recent: dict[int, float] = {}  # notified id -> when (monotonic), oldest first

    def notified(self, payload: str, queues: Iterable[QueueState]) -> None:
        """A control channel notification (the listener's), for the queues of its store
        (ids are unique per schema only)."""
        ids = cancel_ids(payload)
        if ids:
            self._remember(ids)
            for qs in queues:
                self.cancel(qs, ids)

    def held(self, qs: QueueState, slot: Slot) -> None:
        """A job just held (started, or waiting in ``ready``): stopped if its cancel
        came while its claim's reply was on its way to this run."""
        if slot.job.id in self._recent:
            self._stop(qs, slot)

    def _remember(self, ids: set[int]) -> None:
        now = time.monotonic()
        for job_id in ids:
            self._recent.pop(job_id, None)
            self._recent[job_id] = now
        while self._recent:  # oldest first: drop those past their minute
            job_id, at = next(iter(self._recent.items()))
            if at > now - REMEMBERED_FOR:
                break
            del self._recent[job_id]

    def cancel(self, qs: QueueState, ids: set[int]) -> None:
        """Stop the jobs of ``qs`` among ``ids`` that this run holds."""
        for slot in [s for s in qs.held.values() if s.job.id in ids]:
            self._stop(qs, slot)

    def _stop(self, qs: QueueState, slot: Slot) -> None:
        if slot.cancelled:
            return
        slot.cancelled = True  # job_cancelled() is True in its handler from now on
        slot.lost = True  # nothing of it is left to beat or release
        if slot.finishing:
            return  # its outcome is being recorded: the completer says which won
        if not slot.started:
            if slot in qs.ready:  # claimed ahead: dropped unrun
                qs.ready.remove(slot)
                qs.held.pop(slot.key, None)
                self._reports.cancelled(qs, slot)
                qs.signal.set()  # room to claim again
            return
        fut = slot.fut
        if isinstance(fut, asyncio.Task):  # an async handler: CancelledError in it
            # After the task's first step, which is already due: a task cancelled
            # before it would leave the handler's coroutine never awaited (a
            # RuntimeWarning), as when a claim's reply starts a job just cancelled.
            self._run.loop.call_soon(fut.cancel)
        log.debug("job %d on %s: cancelled while running", slot.job.id, qs.name)
