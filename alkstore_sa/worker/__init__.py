"""Workers: LISTEN/NOTIFY-woken consumers that run a handler per job (Q26-Q28).

``Worker`` (blocking, sync handlers) and ``AsyncWorker`` (awaitable, async
handlers) share one asyncio runtime: a listener, a producer per queue, an
executor with heartbeats, and a completer that batches acks.
"""

from ._state import WorkerHealth
from ._worker import AsyncWorker, Worker, default_worker_id

__all__ = ["AsyncWorker", "Worker", "WorkerHealth", "default_worker_id"]
