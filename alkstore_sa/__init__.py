"""alkstore_sa: a PostgreSQL job queue built as a SQLAlchemy 2.x extension."""

from ._extras.migrate import migrate
from ._values.errors import (
    AlkstoreError,
    FailJob,
    HandleSpentError,
    InvalidNameError,
    JobDeadError,
    RetryJob,
    SchemaMissingError,
    SnoozeJob,
    StoreClosedError,
    WorkerStartError,
)
from ._values.job import Job, JobError, QueueStats, SweepResult
from ._values.opts import EnqueueOpts, QueueOpts
from .aio import AsyncJobHandle, AsyncQueue, AsyncStore
from .store import JobHandle, Queue, Store
from .tasks import AsyncTask, Periodic, Task, Tasks
from .worker import AsyncWorker, Worker, WorkerHealth, run_processes

__all__ = [
    "AlkstoreError",
    "AsyncJobHandle",
    "AsyncQueue",
    "AsyncStore",
    "AsyncTask",
    "AsyncWorker",
    "EnqueueOpts",
    "FailJob",
    "HandleSpentError",
    "InvalidNameError",
    "Job",
    "JobDeadError",
    "JobError",
    "JobHandle",
    "Periodic",
    "Queue",
    "QueueOpts",
    "QueueStats",
    "RetryJob",
    "SchemaMissingError",
    "SnoozeJob",
    "Store",
    "StoreClosedError",
    "SweepResult",
    "Task",
    "Tasks",
    "Worker",
    "WorkerHealth",
    "WorkerStartError",
    "migrate",
    "run_processes",
]

__version__ = "0.1.0"
