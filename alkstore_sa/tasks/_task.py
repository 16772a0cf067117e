"""Task objects: a function bound to a queue, deferred as an envelope (T1).

The static types do the work ``mypy`` can do: ``defer(**kwargs)`` is checked
against the function's parameters (a ``ParamSpec``); ``defer`` returns
``int`` on a ``Store`` and an awaitable ``int`` on an ``AsyncStore``
(``Task`` versus ``AsyncTask``).  Python's typing cannot add keyword
parameters to a ``ParamSpec``, so a call that also passes ``session=`` or
``opts=`` matches a looser overload and its task arguments are checked at
run time only (before any SQL, as always).  A session-scoped function
(a ``session`` parameter, first for the static types) gives a
``SessionTask``/``AsyncSessionTask``, whose ``defer`` does not ask for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from .._values.errors import JobDeadError
from .._values.job import Job
from .._values.opts import EnqueueOpts
from ..aio import AsyncQueue
from ..store import Queue
from ._codec import Signature, encode_envelope

__all__ = ["AsyncSessionTask", "AsyncTask", "SessionTask", "Task", "TaskBase"]

P = ParamSpec("P")
R = TypeVar("R")
QueueT = TypeVar("QueueT", Queue, AsyncQueue)
SyncSession = Session | Connection
AsyncSessionLike = AsyncSession | AsyncConnection


class TaskBase(Generic[QueueT]):
    """What every task has: its name, queue handle, function and signature."""

    def __init__(self, fn: Callable[..., Any], name: str, queue: QueueT, sig: Signature) -> None:
        self.fn = fn
        self.name = name
        self.queue: QueueT = queue
        self.signature = sig
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__

    @property
    def takes_session(self) -> bool:
        """True when the function takes ``session``: run session-scoped (Q28)."""
        return self.signature.takes_session

    def payload(self, kwargs: Mapping[str, object]) -> bytes:
        """The envelope for ``kwargs``; ``TypeError`` for anything the worker could not take."""
        where = f"task {self.name!r}"
        self.signature.bind(kwargs, where)
        return encode_envelope(self.name, self.signature.dump(kwargs, where))

    def _decoded(self, job_id: int, job: Job | None) -> Any:
        """R3: a finished job's result decoded (R2), or the error ``task.result()`` raises."""
        if job is None:
            raise LookupError(
                f"job {job_id} of task {self.name!r} kept no result "
                "(acked without keep_completed, cancelled, swept, or no such job)"
            )
        if job.status == "dead":
            raise JobDeadError(job)
        return self.signature.load_result(job.result, f"task {self.name!r}")

    def _payloads(self, many: Iterable[Mapping[str, object]]) -> list[bytes]:
        if isinstance(many, Mapping | str | bytes):
            raise TypeError("defer_many takes a list of kwargs dicts")
        out = []
        for i, kwargs in enumerate(many):
            if not isinstance(kwargs, Mapping):
                raise TypeError(f"defer_many: item {i} is a {type(kwargs).__name__}, not a dict")
            try:
                out.append(self.payload(kwargs))
            except TypeError as exc:
                raise TypeError(f"defer_many: item {i}: {exc}") from None
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calling the task calls the function, here and now."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on queue {self.queue.name!r}>"


def _no_positional(name: str, args: tuple[object, ...]) -> None:
    if args:
        raise TypeError(f"task {name!r}: defer takes keyword arguments only")


class _SyncDefer(TaskBase[Queue], Generic[P]):
    @overload
    def defer(self, *args: P.args, **kwargs: P.kwargs) -> int: ...
    @overload
    def defer(
        self, *, session: SyncSession, opts: EnqueueOpts | None = None, **kwargs: Any
    ) -> int: ...
    @overload
    def defer(
        self, *, opts: EnqueueOpts, session: SyncSession | None = None, **kwargs: Any
    ) -> int: ...
    def defer(self, *args: Any, **kwargs: Any) -> int:
        """Enqueue one call; its job id.  ``session=``/``opts=`` as ``Queue.enqueue``."""
        _no_positional(self.name, args)
        session = kwargs.pop("session", None)
        opts = kwargs.pop("opts", None)
        return self.queue.enqueue(self.payload(kwargs), opts, session=session)

    def defer_many(
        self,
        many: Iterable[Mapping[str, Any]],
        opts: EnqueueOpts | None = None,
        *,
        session: SyncSession | None = None,
    ) -> list[int]:
        """Enqueue one call per kwargs dict, in one statement; the ids in order."""
        return self.queue.enqueue_many(self._payloads(many), opts, session=session)

    def result(self, job_id: int, *, timeout: float | None = None) -> Any:
        """R3: wait for the job, then its return value decoded (dataclasses, models rebuilt).

        ``JobDeadError`` for a dead job, ``LookupError`` when nothing is kept,
        ``TimeoutError`` at ``timeout`` seconds (None: wait forever).
        """
        return self._decoded(job_id, self.queue.wait(job_id, timeout=timeout))


class _AsyncDefer(TaskBase[AsyncQueue], Generic[P]):
    @overload
    async def defer(self, *args: P.args, **kwargs: P.kwargs) -> int: ...
    @overload
    async def defer(
        self, *, session: AsyncSessionLike, opts: EnqueueOpts | None = None, **kwargs: Any
    ) -> int: ...
    @overload
    async def defer(
        self, *, opts: EnqueueOpts, session: AsyncSessionLike | None = None, **kwargs: Any
    ) -> int: ...
    async def defer(self, *args: Any, **kwargs: Any) -> int:
        """Enqueue one call; its job id.  ``session=``/``opts=`` as ``AsyncQueue.enqueue``."""
        _no_positional(self.name, args)
        session = kwargs.pop("session", None)
        opts = kwargs.pop("opts", None)
        return await self.queue.enqueue(self.payload(kwargs), opts, session=session)

    async def defer_many(
        self,
        many: Iterable[Mapping[str, Any]],
        opts: EnqueueOpts | None = None,
        *,
        session: AsyncSessionLike | None = None,
    ) -> list[int]:
        """Enqueue one call per kwargs dict, in one statement; the ids in order."""
        return await self.queue.enqueue_many(self._payloads(many), opts, session=session)

    async def result(self, job_id: int, *, timeout: float | None = None) -> Any:
        """R3: the awaitable twin of ``Task.result``."""
        return self._decoded(job_id, await self.queue.wait(job_id, timeout=timeout))


class Task(_SyncDefer[P], Generic[P, R]):
    """A task on a ``Store``: ``defer(**kwargs) -> int``; calling it calls the function."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]


class SessionTask(_SyncDefer[P], Generic[P, R]):
    """A session-scoped task on a ``Store``: the worker passes ``session`` (Q28)."""

    def __call__(self, session: Session, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(session, *args, **kwargs)  # type: ignore[no-any-return]


class AsyncTask(_AsyncDefer[P], Generic[P, R]):
    """A task on an ``AsyncStore``: ``await defer(**kwargs)``; calling it calls the function."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]


class AsyncSessionTask(_AsyncDefer[P], Generic[P, R]):
    """A session-scoped task on an ``AsyncStore``: the worker passes an ``AsyncSession``."""

    def __call__(self, session: AsyncSession, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(session, *args, **kwargs)  # type: ignore[no-any-return]


# For the annotations of code that only names "a task of some kind".
AnyTask = Task[Any, Any] | SessionTask[Any, Any] | AsyncTask[Any, Any] | AsyncSessionTask[Any, Any]
