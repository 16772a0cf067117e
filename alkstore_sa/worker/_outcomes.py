"""How a worker tells what became of each job: one log record (B1) and the observers (B3, B4).

Every handler run ends in exactly one report here, so the log, the metrics
and the spans agree on it:

- ``acked``: DEBUG;
- ``retried``: WARNING, with the error and the delay;
- ``dead``: ERROR, with the word "dead-lettered" and why;
- ``lost``: WARNING (the claim lapsed, or the outcome could not be
  recorded: the job is handed out again, or buried if it had no attempt
  left, Q12).

The handler's traceback is attached (``exc_info``) to retry and dead-letter
records caused by an exception, not to a deliberate ``RetryJob`` or
``FailJob``.  Every record carries ``alkstore_queue``, ``alkstore_job_id``,
``alkstore_attempt``, ``alkstore_max_attempts`` and ``alkstore_outcome`` as
``extra`` fields for structured log handlers.
"""

from __future__ import annotations

import functools
import logging
import traceback as tb
from typing import Any

from .._extras.instrument import Outcome, notify
from .._values.errors import FailJob, RetryJob
from .._values.job import Job
from .._values.validate import MAX_ERROR_CHARS, stored_text
from ._state import QueueState, RunState, Slot

__all__ = ["Reporter", "traceback_text"]

log = logging.getLogger("alkstore_sa.worker")


def traceback_text(exc: BaseException | None) -> str | None:
    """The handler's traceback for the error history (B2): its last MAX_ERROR_CHARS."""
    if exc is None:
        return None
    text = "".join(tb.format_exception(exc))
    # The end of a traceback says where it failed: keep the last characters.
    return stored_text(text[-MAX_ERROR_CHARS:])


def _deliberate(exc: BaseException | None) -> bool:
    return isinstance(exc, RetryJob | FailJob)


def _ending(exc: BaseException | None, timed_out: bool) -> str:
    """How an attempt that did not succeed ended, in the words of a log record."""
    if timed_out:
        return "timed out"
    if isinstance(exc, RetryJob):
        return "asked to be retried"
    return f"raised {type(exc).__name__}"


def _extra(job: Job, queue: str, outcome: Outcome) -> dict[str, Any]:
    return {
        "alkstore_queue": queue,
        "alkstore_job_id": job.id,
        "alkstore_attempt": job.attempts,
        "alkstore_max_attempts": job.max_attempts,
        "alkstore_outcome": outcome,
    }


class Reporter:
    """Reports the outcome of each handler run of one worker run."""

    def __init__(self, run: RunState) -> None:
        self._run = run

    def _notify(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        for observer in self._run.observers:
            finished = functools.partial(
                observer.finished, qs.name, slot.job, outcome, slot.ran_for
            )
            notify(finished, "finished")

    def _tally(self, qs: QueueState, index: int) -> None:
        """W2: count the outcome for the throughput table (flushed by ``_throughput``)."""
        counts = self._run.tallies.get(qs)
        if counts is None:
            counts = self._run.tallies[qs] = [0, 0, 0]
        counts[index] += 1

    def acked(self, qs: QueueState, slot: Slot, *, by_session: bool = False) -> None:
        job = slot.job
        self._tally(qs, 0)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %d on %s acked (attempt %d/%d)%s",
                job.id,
                qs.name,
                job.attempts,
                job.max_attempts,
                " with the handler's session" if by_session else "",
                extra=_extra(job, qs.name, "acked"),
            )
        if self._run.observers:  # the hot path: one check when none are installed
            self._notify(qs, slot, "acked")

    def retried(
        self,
        qs: QueueState,
        slot: Slot,
        error: str | None,
        delay: float,
        exc: BaseException | None,
        *,
        timed_out: bool = False,
    ) -> None:
        job = slot.job
        self._tally(qs, 1)
        log.warning(
            "job %d on %s %s (attempt %d/%d); retrying in %gs: %s",
            job.id,
            qs.name,
            _ending(exc, timed_out),
            job.attempts,
            job.max_attempts,
            delay,
            error,
            exc_info=None if _deliberate(exc) else exc,
            extra=_extra(job, qs.name, "retried"),
        )
        self._notify(qs, slot, "retried")

    def dead(
        self,
        qs: QueueState,
        slot: Slot,
        error: str | None,
        exc: BaseException | None,
        *,
        timed_out: bool = False,
    ) -> None:
        job = slot.job
        self._tally(qs, 2)
        if isinstance(exc, FailJob):
            why = "failed by its handler" + ("" if error is None else f": {error}")
        else:
            why = f"max attempts exceeded; its last attempt {_ending(exc, timed_out)}: {error}"
        log.error(
            "job %d on %s dead-lettered after attempt %d/%d: %s",
            job.id,
            qs.name,
            job.attempts,
            job.max_attempts,
            why,
            exc_info=None if _deliberate(exc) else exc,
            extra=_extra(job, qs.name, "dead"),
        )
        self._notify(qs, slot, "dead")

    def lost(self, qs: QueueState, slot: Slot, why: str) -> None:
        job = slot.job
        log.warning(
            "job %d on %s (attempt %d/%d): claim lost: %s",
            job.id,
            qs.name,
            job.attempts,
            job.max_attempts,
            why,
            extra=_extra(job, qs.name, "lost"),
        )
        self._notify(qs, slot, "lost")
