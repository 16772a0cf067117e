"""alkstore_sa: a PostgreSQL job queue built as a SQLAlchemy 2.x extension.

The public names load on first use (PEP 562): ``import alkstore_sa`` alone
costs almost nothing, so the ``alkstore`` command starts fast, and no
optional part (Alembic, the web, OpenTelemetry, Prometheus, pydantic) is
imported before a feature needs it (V3).
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
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
    from ._values.limits import Limits, Rate
    from ._values.opts import EnqueueOpts, QueueOpts
    from ._values.workers import WorkerInfo
    from .aio import AsyncJobHandle, AsyncQueue, AsyncStore
    from .store import JobHandle, Queue, Store
    from .tasks import AsyncTask, Periodic, Task, Tasks
    from .worker import AsyncWorker, Worker, WorkerHealth, job_cancelled, run_processes
    from .workflow import Step, Workflow, WorkflowRun, WorkflowStatus

# Where each public name lives, relative to this package.
_HOMES = {
    "migrate": "._extras.migrate",
    **dict.fromkeys(
        [
            "AlkstoreError",
            "FailJob",
            "HandleSpentError",
            "InvalidNameError",
            "JobDeadError",
            "RetryJob",
            "SchemaMissingError",
            "SnoozeJob",
            "StoreClosedError",
            "WorkerStartError",
        ],
        "._values.errors",
    ),
    **dict.fromkeys(["Job", "JobError", "QueueStats", "SweepResult"], "._values.job"),
    **dict.fromkeys(["EnqueueOpts", "QueueOpts"], "._values.opts"),
    "WorkerInfo": "._values.workers",
    **dict.fromkeys(["Limits", "Rate"], "._values.limits"),
    **dict.fromkeys(["AsyncJobHandle", "AsyncQueue", "AsyncStore"], ".aio"),
    **dict.fromkeys(["JobHandle", "Queue", "Store"], ".store"),
    **dict.fromkeys(["AsyncTask", "Periodic", "Task", "Tasks"], ".tasks"),
    **dict.fromkeys(
        ["AsyncWorker", "Worker", "WorkerHealth", "job_cancelled", "run_processes"], ".worker"
    ),
    **dict.fromkeys(["Step", "Workflow", "WorkflowRun", "WorkflowStatus"], ".workflow"),
}

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
    "Limits",
    "Periodic",
    "Queue",
    "QueueOpts",
    "QueueStats",
    "Rate",
    "RetryJob",
    "SchemaMissingError",
    "SnoozeJob",
    "Step",
    "Store",
    "StoreClosedError",
    "SweepResult",
    "Task",
    "Tasks",
    "Worker",
    "WorkerHealth",
    "WorkerInfo",
    "WorkerStartError",
    "Workflow",
    "WorkflowRun",
    "WorkflowStatus",
    "job_cancelled",
    "migrate",
    "run_processes",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> _typing.Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
