"""Workers: LISTEN/NOTIFY-woken consumers that run a handler per job (Q26-Q28).

``Worker`` (blocking, sync handlers) and ``AsyncWorker`` (awaitable, async
handlers) share one asyncio runtime: a listener, a producer per queue, an
executor with heartbeats, and a completer that batches acks.
``run_processes`` (X1) runs N of them, one per process, under a supervisor.
"""

from ._cancel import job_cancelled
from ._processes import ChildHealth, ProcessesHealth, ProcessSupervisor, run_processes
from ._state import WorkerHealth
from ._worker import AsyncWorker, Worker, default_worker_id

__all__ = [
    "AsyncWorker",
    "ChildHealth",
    "ProcessSupervisor",
    "ProcessesHealth",
    "Worker",
    "WorkerHealth",
    "default_worker_id",
    "job_cancelled",
    "run_processes",
]
