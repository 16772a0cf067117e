"""alkstore_sa: a PostgreSQL job queue built as a SQLAlchemy 2.x extension."""

from ._errors import (
    AlkstoreError,
    FailJob,
    HandleSpentError,
    InvalidNameError,
    RetryJob,
    SchemaMissingError,
    StoreClosedError,
)
from ._job import Job, QueueStats, SweepResult
from ._migrate import migrate
from ._opts import EnqueueOpts, QueueOpts
from .aio import AsyncJobHandle, AsyncQueue, AsyncStore
from .store import JobHandle, Queue, Store
from .worker import AsyncWorker, Worker

__all__ = [
    "AlkstoreError",
    "AsyncJobHandle",
    "AsyncQueue",
    "AsyncStore",
    "AsyncWorker",
    "EnqueueOpts",
    "FailJob",
    "HandleSpentError",
    "InvalidNameError",
    "Job",
    "JobHandle",
    "Queue",
    "QueueOpts",
    "QueueStats",
    "RetryJob",
    "SchemaMissingError",
    "Store",
    "StoreClosedError",
    "SweepResult",
    "Worker",
    "migrate",
]

__version__ = "0.1.0"
