"""What became of a job: the outcome value, and its report (B1 log record, B3/B4 observers).

The executor maps how a handler ended to an ``Outcome`` (``acked``,
``retry``, ``dead``, ``released``, ``lost``); the completer settles it in
the database and reports what it came to, exactly once per handler run, so
the log, the metrics and the spans agree on it:

- ``acked``: DEBUG;
- ``retried``: WARNING, with the error and when the job is due again;
- ``dead``: ERROR, with the word "dead-lettered" and why;
- ``lost``: WARNING (the claim lapsed, or the outcome could not be
  recorded: the job is handed out again, or buried if it had no attempt
  left, Q12);
- ``snoozed`` (Z1) and ``cancelled`` (C1): INFO;
- ``released`` (at shutdown): WARNING for a running job, DEBUG for one
  claimed ahead and never started.

The handler's traceback is attached (``exc_info``) to retry and dead-letter
records caused by an exception, not to a deliberate ``RetryJob`` or
``FailJob``.  Messages and tracebacks are each cut to 8,000 characters
(V4, ``_bounded``).  Every record carries ``alkstore_queue``,
``alkstore_job_id``, ``alkstore_attempt``, ``alkstore_max_attempts`` and
``alkstore_outcome`` as ``extra`` fields for structured log handlers.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .._db.ops import Released
from .._extras.instrument import Outcome as Reported
from .._extras.instrument import notify
from .._values.errors import FailJob, RetryJob
from .._values.job import Job
from ._bounded import MAX_CHARS, Trace, cut
from ._state import QueueState, RunState, Slot

__all__ = ["Outcome", "Reporter", "Reports"]

log = logging.getLogger("alkstore_sa.worker")

# Room in a record for the words around an error, so the whole message fits.
_ERROR_CHARS = MAX_CHARS - 500


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a handler run ended, as the completer settles it.

    ``acked`` (``by_session``: its session acked it already, Q28), ``retry``
    after ``delay`` seconds (dead-lettered by the database on the last
    attempt, Q18), ``dead`` now (``FailJob``, Q19), ``released`` (given back
    at shutdown), ``lost`` (nothing to record: ``why``), ``snoozed`` for
    ``delay`` seconds (``SnoozeJob``, Z1), ``cancelled`` (its row was
    cancelled while it ran: nothing to record, C1).
    """

    kind: Literal["acked", "retry", "dead", "released", "lost", "snoozed", "cancelled"]
    error: str | None = None
    delay: float = 0.0
    exc: BaseException | None = None  # what the handler raised, if it raised
    trace: Trace | None = None  # its traceback, bounded (B2, V4)
    timed_out: bool = False
    by_session: bool = False
    why: str = ""
    result: bytes | None = None  # R2: what an acked job that keeps a result produced


class Reports(Protocol):
    """Where settled outcomes go: the worker's ``Reporter``, or ``testing``'s tally."""

    def acked(self, qs: QueueState, slot: Slot, *, by_session: bool = False) -> None: ...

    def retried(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None: ...

    def dead(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None: ...

    def lost(
        self, qs: QueueState, slot: Slot, why: str, outcome: Outcome | None = None
    ) -> None: ...

    def released(self, qs: QueueState, slot: Slot, result: Released | None) -> None: ...

    def snoozed(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None: ...

    def cancelled(self, qs: QueueState, slot: Slot) -> None: ...


def _deliberate(exc: BaseException | None) -> bool:
    return isinstance(exc, RetryJob | FailJob)


def _ending(outcome: Outcome) -> str:
    """How an attempt that did not succeed ended, in the words of a log record."""
    if outcome.timed_out:
        return "timed out"
    if isinstance(outcome.exc, RetryJob):
        return "asked to be retried"
    return f"raised {type(outcome.exc).__name__}"


def _cut_error(error: str | None) -> str | None:
    return None if error is None else cut(error, _ERROR_CHARS)


def _exc_info(outcome: Outcome) -> Any:
    if _deliberate(outcome.exc) or outcome.trace is None:
        return None
    return outcome.trace.exc_info


def _extra(job: Job, queue: str, outcome: Reported | None) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "alkstore_queue": queue,
        "alkstore_job_id": job.id,
        "alkstore_attempt": job.attempts,
        "alkstore_max_attempts": job.max_attempts,
    }
    if outcome is not None:
        extra["alkstore_outcome"] = outcome
    return extra


class Reporter:
    """Reports the outcome of each handler run of one worker run."""

    def __init__(self, run: RunState) -> None:
        self._run = run

    def _notify(self, qs: QueueState, slot: Slot, outcome: Reported) -> None:
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

    def retried(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        job = slot.job
        self._tally(qs, 1)
        # "retrying in Ns": the job is claimable N seconds after the retry,
        # and this worker's timer claims it then (V5), not a poll later.
        log.warning(
            "job %d on %s %s (attempt %d/%d); retrying in %gs: %s",
            job.id,
            qs.name,
            _ending(outcome),
            job.attempts,
            job.max_attempts,
            outcome.delay,
            _cut_error(outcome.error),
            exc_info=_exc_info(outcome),
            extra=_extra(job, qs.name, "retried"),
        )
        self._notify(qs, slot, "retried")

    def dead(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        job = slot.job
        self._tally(qs, 2)
        error = _cut_error(outcome.error)
        if isinstance(outcome.exc, FailJob):
            why = "failed by its handler" + ("" if error is None else f": {error}")
        else:
            why = f"max attempts exceeded; its last attempt {_ending(outcome)}: {error}"
        log.error(
            "job %d on %s dead-lettered after attempt %d/%d: %s",
            job.id,
            qs.name,
            job.attempts,
            job.max_attempts,
            why,
            exc_info=_exc_info(outcome),
            extra=_extra(job, qs.name, "dead"),
        )
        self._notify(qs, slot, "dead")

    def lost(self, qs: QueueState, slot: Slot, why: str, outcome: Outcome | None = None) -> None:
        job = slot.job
        log.warning(
            "job %d on %s (attempt %d/%d): claim lost: %s",
            job.id,
            qs.name,
            job.attempts,
            job.max_attempts,
            cut(why, _ERROR_CHARS),
            extra=_extra(job, qs.name, "lost"),
        )
        self._notify(qs, slot, "lost")

    def snoozed(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        """Z1: put back for later by its handler; the attempt refunded."""
        job = slot.job
        log.info(
            "job %d on %s snoozed for %gs (attempt %d/%d refunded)",
            job.id,
            qs.name,
            outcome.delay,
            job.attempts,
            job.max_attempts,
            extra=_extra(job, qs.name, "snoozed"),
        )
        self._notify(qs, slot, "snoozed")

    def cancelled(self, qs: QueueState, slot: Slot) -> None:
        """C1: its row was cancelled; the handler was stopped or never started."""
        job = slot.job
        log.info(
            "job %d on %s cancelled (attempt %d/%d)%s",
            job.id,
            qs.name,
            job.attempts,
            job.max_attempts,
            "" if slot.started else "; claimed ahead, not run",
            extra=_extra(job, qs.name, "cancelled"),
        )
        self._notify(qs, slot, "cancelled")

    def released(self, qs: QueueState, slot: Slot, result: Released | None) -> None:
        """A job given back at shutdown (Q27): pending again, or dead on its last attempt."""
        job = slot.job
        extra = _extra(job, qs.name, None)
        if result == "released" and not slot.started:
            log.debug(
                "job %d on %s: claimed ahead, not started at shutdown; released",
                job.id,
                qs.name,
                extra=extra,
            )
        elif result == "released":
            log.warning(
                "job %d on %s (attempt %d/%d): still running at shutdown; "
                "released for other workers",
                job.id,
                qs.name,
                job.attempts,
                job.max_attempts,
                extra=extra,
            )
        elif result == "dead":
            log.error(
                "job %d on %s dead-lettered after attempt %d/%d: max attempts exceeded; "
                "it was %s at shutdown",
                job.id,
                qs.name,
                job.attempts,
                job.max_attempts,
                "still running" if slot.started else "claimed on its last attempt, not started",
                extra=extra,
            )
