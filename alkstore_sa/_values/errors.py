"""The exception tree, drawn in one place.

``AlkstoreError`` is the root of everything the library raises on its own
account.  ``FailJob`` and ``RetryJob`` are not errors of the library: a
worker's handler raises them to choose what happens to its job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .job import Job

__all__ = [
    "AlkstoreError",
    "FailJob",
    "HandleSpentError",
    "InvalidNameError",
    "JobDeadError",
    "RetryJob",
    "SchemaMissingError",
    "SnoozeJob",
    "StoreClosedError",
]


class AlkstoreError(Exception):
    """Base class of the exceptions alkstore_sa raises."""


class InvalidNameError(AlkstoreError, ValueError):
    """A queue name, schema name or worker id that the rules refuse (Q2)."""


class StoreClosedError(AlkstoreError):
    """The store was closed; no queue operation runs after ``close()`` (Q29)."""


class HandleSpentError(AlkstoreError):
    """A second terminal operation (ack/retry/fail) on one job handle (Q20)."""


class SchemaMissingError(AlkstoreError):
    """The database has no alkstore tables in the expected schema.

    Run ``alkstore migrate`` (or ``alembic upgrade head``) first.
    """


class FailJob(Exception):
    """Raised by a worker handler to dead-letter its job at once."""

    def __init__(self, error: str | None = None) -> None:
        super().__init__(error)
        self.error = error


class RetryJob(Exception):
    """Raised by a worker handler to retry its job, optionally after ``delay``."""

    def __init__(
        self, error: str | None = None, delay: float | int | timedelta | None = None
    ) -> None:
        super().__init__(error)
        self.error = error
        self.delay = delay


class SnoozeJob(AlkstoreError):
    """Raised by a worker handler to put its job back for ``delay`` seconds (Z1).

    The attempt is refunded and nothing is recorded as an error: a snooze
    is not a failure.  ``delay`` (seconds or a ``timedelta``, >= 0) is
    checked here, so ``SnoozeJob(-1)`` raises ``ValueError`` at once.
    """

    def __init__(self, delay: float | int | timedelta) -> None:
        from .validate import duration  # validate imports this module

        seconds = duration(delay, "delay", allow_zero=True)
        super().__init__(f"snoozed for {seconds:g}s")
        self.delay = seconds


class JobDeadError(AlkstoreError):
    """``task.result()`` of a job that died (R3); ``.job`` is the dead ``Job``."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} on {job.queue!r} is dead: {job.last_error}")
        self.job = job
