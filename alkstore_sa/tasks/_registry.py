"""``Tasks``: the registry a producer defers through and a worker runs (T1, T2)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from .._values.opts import QueueOpts
from ..aio import AsyncQueue, AsyncStore
from ..store import Queue, Store
from ._codec import Signature
from ._task import AsyncSessionTask, AsyncTask, SessionTask, Task, TaskBase

__all__ = ["Tasks"]

P = ParamSpec("P")
R = TypeVar("R")
StoreT = TypeVar("StoreT", Store, AsyncStore)


class _SyncDecorator(Protocol):
    @overload
    def __call__(self, fn: Callable[Concatenate[Session, P], R], /) -> SessionTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class _AsyncDecorator(Protocol):
    @overload
    def __call__(
        self, fn: Callable[Concatenate[AsyncSession, P], R], /
    ) -> AsyncSessionTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> AsyncTask[P, R]: ...


def default_name(fn: Callable[..., Any]) -> str:
    """``module.qualname``: stable across processes, unique per function."""
    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not qualname:
        raise TypeError(f"task: {fn!r} has no __qualname__; give it name=")
    return f"{module}.{qualname}"


class Tasks(Generic[StoreT]):
    """The tasks of one store, by name; ``Worker(tasks)`` runs them all (T2).

    ``Tasks(store)`` on a ``Store`` makes ``Task``s (``defer`` returns the
    job id); on an ``AsyncStore``, ``AsyncTask``s (``defer`` is a coroutine).
    """

    def __init__(self, store: StoreT) -> None:
        if not isinstance(store, Store | AsyncStore):
            raise TypeError(f"Tasks takes a Store or AsyncStore, got {type(store).__name__}")
        self.store: StoreT = store
        self._tasks: dict[str, TaskBase[Any]] = {}
        self._queues: dict[str, Queue | AsyncQueue] = {}

    @property
    def is_async(self) -> bool:
        return isinstance(self.store, AsyncStore)

    @overload
    def task(
        self: Tasks[Store], *, queue: str, opts: QueueOpts | None = None, name: str | None = None
    ) -> _SyncDecorator: ...
    @overload
    def task(
        self: Tasks[AsyncStore],
        *,
        queue: str,
        opts: QueueOpts | None = None,
        name: str | None = None,
    ) -> _AsyncDecorator: ...
    def task(self, *, queue: str, opts: QueueOpts | None = None, name: str | None = None) -> Any:
        """Register the decorated function as a task on ``queue``.

        Checked here, before anything runs: the queue name (Q2), that two
        tasks on one queue give it the same ``QueueOpts``, that the task name
        is new, and that the function's parameters can travel by name.
        """
        if opts is not None and not isinstance(opts, QueueOpts):
            raise TypeError(f"opts must be a QueueOpts, got {type(opts).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError("task name must be a non-empty string")
        handle = self._queue(queue, opts or QueueOpts())

        def register(fn: Callable[..., Any]) -> TaskBase[Any]:
            if not callable(fn):
                raise TypeError(f"tasks.task decorates a function, got {type(fn).__name__}")
            task_name = default_name(fn) if name is None else name
            if task_name in self._tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            sig = Signature.of(fn)
            if sig.takes_session:
                first = next(iter(inspect.signature(fn).parameters))
                cls: type[TaskBase[Any]] = (
                    (AsyncSessionTask if self.is_async else SessionTask)
                    if first == "session"
                    else (AsyncTask if self.is_async else Task)
                )
            else:
                cls = AsyncTask if self.is_async else Task
            made = cls(fn, task_name, handle, sig)
            self._tasks[task_name] = made
            return made

        return register

    def _queue(self, name: str, opts: QueueOpts) -> Queue | AsyncQueue:
        known = self._queues.get(name)
        if known is not None:
            if known.opts != opts:
                raise ValueError(
                    f"queue {name!r} already has tasks with {known.opts}; "
                    f"tasks on one queue must agree on its QueueOpts, got {opts}"
                )
            return known
        made = self.store.queue(name, opts)  # validates the name (Q2), no SQL (Q1)
        self._queues[name] = made
        return made

    def get(self, name: str) -> TaskBase[Any] | None:
        """The task registered as ``name``, or None."""
        return self._tasks.get(name)

    @property
    def queues(self) -> tuple[Queue | AsyncQueue, ...]:
        """The queue handles the tasks use, in registration order."""
        return tuple(self._queues.values())

    def by_queue(self) -> dict[str, dict[str, TaskBase[Any]]]:
        """Queue name -> task name -> task."""
        out: dict[str, dict[str, TaskBase[Any]]] = {name: {} for name in self._queues}
        for task in self._tasks.values():
            out[task.queue.name][task.name] = task
        return out

    def __iter__(self) -> Iterator[TaskBase[Any]]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __repr__(self) -> str:
        return f"<Tasks {len(self._tasks)} task(s) on {', '.join(self._queues) or 'no queues'}>"
