"""Task objects: a function bound to a queue, deferred as an envelope (T1, V6).

The static types do the work ``mypy`` can do: ``defer(**kwargs)`` is checked
against the function's parameters (a ``ParamSpec``); ``defer`` returns
``int`` on a ``Store`` and an awaitable ``int`` on an ``AsyncStore``
(``Task`` versus ``AsyncTask``).  A hidden first positional parameter of a
type of its own (``KeywordsOnly``) makes a positional argument a type
error, since task arguments travel by name.  Python's typing cannot add
keyword parameters to a ``ParamSpec``, so ``session=``/``opts=`` go to
``task.configure(session=..., opts=...)``, whose ``defer(**kwargs)`` is
checked just as fully (procrastinate's shape); ``task.defer(...,
session=, opts=)`` still works, through a looser overload.

Every way to defer checks each argument against its annotation at run
time, before any SQL (``_typecheck``): a mismatch is a ``TypeError`` naming
the parameter.  A session-scoped function (a ``session`` parameter, first
for the static types) gives a ``SessionTask``/``AsyncSessionTask``, whose
``defer`` does not ask for it.
"""

from __future__ import annotations

import typing
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
from ._typecheck import check_arguments

__all__ = [
    "AsyncDeferrer",
    "AsyncSessionTask",
    "AsyncTask",
    "Deferrer",
    "KeywordsOnly",
    "SessionTask",
    "Task",
    "TaskBase",
]

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
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # annotations that do not resolve: no run-time type checks
            hints = {}
        # V6: what defer checks each argument against (session is the worker's).
        self._hints = {k: v for k, v in hints.items() if k not in ("return", "session")}

    @property
    def takes_session(self) -> bool:
        """True when the function takes ``session``: run session-scoped (Q28)."""
        return self.signature.takes_session

    def payload(self, kwargs: Mapping[str, object]) -> bytes:
        """The envelope for ``kwargs``; ``TypeError`` for anything the worker could not take."""
        where = f"task {self.name!r}"
        self.signature.bind(kwargs, where)
        data = self.signature.dump(kwargs, where)  # what JSON cannot hold, said first
        check_arguments(self._hints, kwargs, where)
        return encode_envelope(self.name, data)

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


class KeywordsOnly:
    """The type of ``defer``'s hidden first parameter: any positional argument given
    there is a type error for ``mypy`` (and a ``TypeError`` at run time)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<keyword arguments only>"


_KEYWORDS_ONLY = KeywordsOnly()


def _no_positional(name: str, args: tuple[object, ...]) -> None:
    if args:
        raise TypeError(f"task {name!r}: defer takes keyword arguments only")


class _SyncDefer(TaskBase[Queue], Generic[P]):
    @overload
    def defer(
        self, _keywords_only: KeywordsOnly = ..., /, *args: P.args, **kwargs: P.kwargs
    ) -> int: ...
    @overload
    def defer(
        self, *, session: SyncSession, opts: EnqueueOpts | None = None, **kwargs: Any
    ) -> int: ...
    @overload
    def defer(
        self, *, opts: EnqueueOpts, session: SyncSession | None = None, **kwargs: Any
    ) -> int: ...
    # mypy cannot match the hidden positional-only parameter of the first overload
    # against *args; the implementation does take every call the overloads allow.
    def defer(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[misc]
        """Enqueue one call; its job id.  ``session=``/``opts=`` as ``Queue.enqueue``
        (``configure(session=, opts=).defer(...)`` is the form ``mypy`` checks)."""
        _no_positional(self.name, args)
        session = kwargs.pop("session", None)
        opts = kwargs.pop("opts", None)
        return self.queue.enqueue(self.payload(kwargs), opts, session=session)

    def configure(
        self, *, session: SyncSession | None = None, opts: EnqueueOpts | None = None
    ) -> Deferrer[P]:
        """A deferrer bound to ``session`` and ``opts``: ``.defer(**kwargs)`` takes the
        function's own parameters, fully checked by ``mypy`` (V6)."""
        return Deferrer(self, session, opts)

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
    async def defer(
        self, _keywords_only: KeywordsOnly = ..., /, *args: P.args, **kwargs: P.kwargs
    ) -> int: ...
    @overload
    async def defer(
        self, *, session: AsyncSessionLike, opts: EnqueueOpts | None = None, **kwargs: Any
    ) -> int: ...
    @overload
    async def defer(
        self, *, opts: EnqueueOpts, session: AsyncSessionLike | None = None, **kwargs: Any
    ) -> int: ...
    # As in _SyncDefer.defer: every call the overloads allow is taken.
    async def defer(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[misc]
        """Enqueue one call; its job id.  ``session=``/``opts=`` as ``AsyncQueue.enqueue``
        (``configure(session=, opts=).defer(...)`` is the form ``mypy`` checks)."""
        _no_positional(self.name, args)
        session = kwargs.pop("session", None)
        opts = kwargs.pop("opts", None)
        return await self.queue.enqueue(self.payload(kwargs), opts, session=session)

    def configure(
        self, *, session: AsyncSessionLike | None = None, opts: EnqueueOpts | None = None
    ) -> AsyncDeferrer[P]:
        """A deferrer bound to ``session`` and ``opts``: ``await .defer(**kwargs)`` takes
        the function's own parameters, fully checked by ``mypy`` (V6)."""
        return AsyncDeferrer(self, session, opts)

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


class Deferrer(Generic[P]):
    """``task.configure(session=, opts=)``: defers with those, the arguments checked."""

    __slots__ = ("_opts", "_session", "_task")

    def __init__(
        self, task: _SyncDefer[P], session: SyncSession | None, opts: EnqueueOpts | None
    ) -> None:
        if opts is not None and not isinstance(opts, EnqueueOpts):
            raise TypeError(f"opts must be EnqueueOpts, got {type(opts).__name__}")
        self._task, self._session, self._opts = task, session, opts

    def defer(
        self, _keywords_only: KeywordsOnly = _KEYWORDS_ONLY, /, *args: P.args, **kwargs: P.kwargs
    ) -> int:
        """Enqueue one call with the configured session and options; its job id."""
        _no_positional(self._task.name, () if _keywords_only is _KEYWORDS_ONLY else (0, *args))
        payload = self._task.payload(kwargs)
        return self._task.queue.enqueue(payload, self._opts, session=self._session)

    def defer_many(self, many: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue one call per kwargs dict, in one statement; the ids in order."""
        payloads = self._task._payloads(many)
        return self._task.queue.enqueue_many(payloads, self._opts, session=self._session)


class AsyncDeferrer(Generic[P]):
    """``task.configure(session=, opts=)`` on an ``AsyncStore``'s task."""

    __slots__ = ("_opts", "_session", "_task")

    def __init__(
        self, task: _AsyncDefer[P], session: AsyncSessionLike | None, opts: EnqueueOpts | None
    ) -> None:
        if opts is not None and not isinstance(opts, EnqueueOpts):
            raise TypeError(f"opts must be EnqueueOpts, got {type(opts).__name__}")
        self._task, self._session, self._opts = task, session, opts

    async def defer(
        self, _keywords_only: KeywordsOnly = _KEYWORDS_ONLY, /, *args: P.args, **kwargs: P.kwargs
    ) -> int:
        """Enqueue one call with the configured session and options; its job id."""
        _no_positional(self._task.name, () if _keywords_only is _KEYWORDS_ONLY else (0, *args))
        payload = self._task.payload(kwargs)
        return await self._task.queue.enqueue(payload, self._opts, session=self._session)

    async def defer_many(self, many: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue one call per kwargs dict, in one statement; the ids in order."""
        payloads = self._task._payloads(many)
        return await self._task.queue.enqueue_many(payloads, self._opts, session=self._session)


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
