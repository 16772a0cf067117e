"""The exception tree, drawn in one place.

``AlkstoreError`` is the root of everything the library raises on its own
account.  ``FailJob`` and ``RetryJob`` are not errors of the library: a
worker's handler raises them to choose what happens to its job.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = [
    "AlkstoreError",
    "FailJob",
    "HandleSpentError",
    "InvalidNameError",
    "RetryJob",
    "SchemaMissingError",
    "StoreClosedError",
    "WorkerStartError",
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
