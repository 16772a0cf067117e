"""The exception tree, drawn in one place.

``AlkstoreError`` is the root of everything the library raises on its own
account; each keeps the builtin base a caller may already catch::

    AlkstoreError
    +-- InvalidNameError (also ValueError)      a queue/schema name or worker id (Q2)
    +-- StoreClosedError                        an operation after close() (Q29)
    +-- HandleSpentError                        a second ack/retry/fail (Q20)
    +-- SchemaMissingError                      no alkstore tables: migrate first
    +-- InvalidEnvelope (also ValueError)       a payload that is no task envelope (T1)
    +-- UnknownTaskError (also LookupError)     a task this worker does not have (T2)
    +-- WorkerStartError                        a worker process failed at its first start (X1)

``FailJob`` and ``RetryJob`` are not errors of the library: a worker's
handler raises them to choose what happens to its job.  Errors of the
driver or of SQLAlchemy (``sqlalchemy.exc.DBAPIError``...) pass through as
they are.
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
    "InvalidEnvelope",
    "InvalidNameError",
    "JobDeadError",
    "RetryJob",
    "SchemaMissingError",
    "SnoozeJob",
    "StoreClosedError",
    "UnknownTaskError",
    "WorkerStartError",
]


def _cut(error: str | None) -> str | None:
    """A handler's error text cut as the Worker stores it (``validate.cut_error``)."""
    if not isinstance(error, str):
        return error
    from .validate import cut_error  # validate imports this module at its top

    return cut_error(error)


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


class InvalidEnvelope(AlkstoreError, ValueError):
    """A payload that is not a version-1 task envelope (T1): its job dies at once."""


class UnknownTaskError(AlkstoreError, LookupError):
    """A job names a task this worker does not have; retried (a newer deploy may have it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown task '{name}'")
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])  # LookupError would quote it again


class WorkerStartError(AlkstoreError):
    """A worker process of ``run_processes`` failed at its first start (X1).

    ``message`` is the child's one-line error, ``code`` the exit code it
    asks for (2: a usage mistake such as a bad target), ``pid`` the child's.
    """

    def __init__(self, message: str, *, code: int = 1, pid: int | None = None) -> None:
        super().__init__(f"worker process {pid} failed at start: {message}")
        self.message = message
        self.code = code
        self.pid = pid


class FailJob(Exception):
    """Raised by a worker handler to dead-letter its job at once."""

    def __init__(self, error: str | None = None) -> None:
        error = _cut(error)
        super().__init__(error)
        self.error = error


class RetryJob(Exception):
    """Raised by a worker handler to retry its job, optionally after ``delay``."""

    def __init__(
        self, error: str | None = None, delay: float | int | timedelta | None = None
    ) -> None:
        error = _cut(error)
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

    def __reduce__(self) -> tuple[type[SnoozeJob], tuple[float]]:
        # X2: raised in a process pool's child, it crosses back pickled.
        return (type(self), (self.delay,))


class JobDeadError(AlkstoreError):
    """``task.result()`` of a job that died (R3); ``.job`` is the dead ``Job``."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} on {job.queue!r} is dead: {job.last_error}")
        self.job = job
