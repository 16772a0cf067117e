"""How a worker runs a ``Tasks`` registry (T2): one handler per queue, dispatching by name.

The handler of a queue reads the envelope, finds the task by its name among
that queue's tasks, rebuilds the arguments and calls the function:

- a payload that is not a version-1 envelope can never run: it dies at once
  (``FailJob``) with ``last_error`` starting ``invalid task payload``;
- a task name this worker does not know may be one a newer deploy added:
  it is retried on the queue's curve, and dies as ``unknown task '<name>'``
  when its attempts run out (the retry's error is the dead row's, Q18);
- arguments that no longer fit the function (a parameter renamed between
  deploys) are retried the same way, with the ``TypeError``'s text.

A queue with any session-scoped task gets a ``(job, session)`` handler, so
that task's writes commit with the ack (Q28); its other tasks simply do not
receive the session (their ack rides in the same transaction).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .._values.errors import FailJob, UnknownTaskError
from .._values.job import Job
from ._codec import InvalidEnvelope, decode_envelope
from ._registry import Tasks
from ._task import TaskBase

__all__ = ["UnknownTaskError", "handlers_for"]

Handler = Callable[..., Any]


def _resolve(job: Job, known: Mapping[str, TaskBase[Any]]) -> tuple[TaskBase[Any], dict[str, Any]]:
    try:
        name, kwargs = decode_envelope(job.payload)
    except InvalidEnvelope as exc:
        raise FailJob(f"invalid task payload: {exc}") from None
    task = known.get(name)
    if task is None:
        raise UnknownTaskError(name)
    return task, task.signature.load(kwargs, f"task {name!r}")


def _result(job: Job, task: TaskBase[Any], value: object) -> bytes | None:
    """R2: the task's return value encoded as the job's result, when the job keeps one."""
    if job.keep_completed is None:
        return None  # nothing keeps it: ignored, as before
    return task.signature.dump_result(value, f"task {task.name!r}")


def _is_async(task: TaskBase[Any]) -> bool:
    return inspect.iscoroutinefunction(task.fn)


def _sync_handler(queue: str, known: Mapping[str, TaskBase[Any]]) -> Handler:
    for task in known.values():
        if task.takes_session and _is_async(task):
            raise TypeError(
                f"Worker: task {task.name!r} on queue {queue!r} is async and takes a session; "
                "a sync Worker gives a sync Session: use AsyncWorker with an AsyncStore"
            )

    def call(job: Job, session: object) -> object:
        task, kwargs = _resolve(job, known)
        if task.takes_session:
            kwargs["session"] = session
        if _is_async(task):
            # Its own event loop in the handler's thread: a sync Worker still
            # runs an `async def` task to the end before acking it.
            return _result(job, task, asyncio.run(task.fn(**kwargs)))
        return _result(job, task, task.fn(**kwargs))

    if any(task.takes_session for task in known.values()):

        def run_with_session(job: Job, session: object) -> object:
            return call(job, session)

        handler: Handler = run_with_session
    else:

        def run(job: Job) -> object:
            return call(job, None)

        handler = run
    handler.__qualname__ = f"tasks[{queue}]"
    return handler


def _async_handler(queue: str, known: Mapping[str, TaskBase[Any]]) -> Handler:
    for task in known.values():
        if task.takes_session and not _is_async(task):
            raise TypeError(
                f"AsyncWorker: task {task.name!r} on queue {queue!r} takes a session but is "
                "not async; an AsyncWorker gives an AsyncSession to `async def` tasks"
            )

    async def call(job: Job, session: object) -> object:
        task, kwargs = _resolve(job, known)
        if task.takes_session:
            kwargs["session"] = session
        if _is_async(task):
            return _result(job, task, await task.fn(**kwargs))
        # A plain function must not block the event loop the worker runs on.
        return _result(job, task, await asyncio.to_thread(task.fn, **kwargs))

    if any(task.takes_session for task in known.values()):

        async def run_with_session(job: Job, session: object) -> object:
            return await call(job, session)

        handler: Handler = run_with_session
    else:

        async def run(job: Job) -> object:
            return await call(job, None)

        handler = run
    handler.__qualname__ = f"tasks[{queue}]"
    return handler


def handlers_for(tasks: Tasks[Any], *, is_async: bool) -> dict[Any, Handler]:
    """``{queue handle: handler}`` for every queue of ``tasks``, for ``Worker``/``AsyncWorker``."""
    what = "AsyncWorker" if is_async else "Worker"
    if tasks.is_async != is_async:
        need = "AsyncStore" if is_async else "Store"
        raise TypeError(f"{what} runs the tasks of a Tasks({need}); use the other worker")
    if not len(tasks):
        raise ValueError(f"{what}: the Tasks registry has no tasks")
    grouped = tasks.by_queue()
    make = _async_handler if is_async else _sync_handler
    return {
        queue: make(queue.name, grouped[queue.name])
        for queue in tasks.queues
        if grouped[queue.name]
    }
