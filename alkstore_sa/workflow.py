"""Workflows (G1-G4): steps that run once every step they come after has been acked.

``Workflow(store, name=...)`` collects steps -- ``add(task, **kwargs)``
for a task, ``add_job(queue, payload)`` for a plain queue -- and
``defer(session=...)`` writes them all in one transaction (the caller's
with ``session=``).  A ``Store``'s workflow defers and returns a
``WorkflowRun``; an ``AsyncStore``'s returns an awaitable of one.  The
checks run in ``_calls.workflow`` (before any SQL), the statements in
``_db.sql.workflow``; this module is the face.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ._calls.workflow import WorkflowCore
from ._values.opts import EnqueueOpts
from ._values.workflow import Step, WorkflowRun, WorkflowStatus
from .aio import AsyncQueue, AsyncSessionLike, AsyncStore
from .aio import queue_parts as async_queue_parts
from .store import Queue, Store, SyncSession, queue_parts
from .tasks._task import KeywordsOnly, TaskBase, _AsyncDefer, _SyncDefer

__all__ = ["Step", "Workflow", "WorkflowRun", "WorkflowStatus"]

P = ParamSpec("P")
R = TypeVar("R", WorkflowRun, Awaitable[WorkflowRun])


class Workflow(Generic[R]):
    """A workflow being built: steps, the steps each comes after, then ``defer``."""

    __slots__ = ("_core", "_store")

    @overload
    def __init__(self: Workflow[WorkflowRun], store: Store, *, name: str) -> None: ...
    @overload
    def __init__(
        self: Workflow[Awaitable[WorkflowRun]], store: AsyncStore, *, name: str
    ) -> None: ...
    def __init__(self, store: Store | AsyncStore, *, name: str) -> None:
        if not isinstance(store, Store | AsyncStore):
            raise TypeError(f"Workflow takes a Store or an AsyncStore, got {type(store).__name__}")
        self._store = store
        self._core = WorkflowCore(store.schema, name)

    @property
    def name(self) -> str:
        return self._core.name

    @overload
    def add(
        self,
        task: _SyncDefer[P] | _AsyncDefer[P],
        _keywords_only: KeywordsOnly = ...,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Step: ...
    @overload
    def add(
        self,
        task: TaskBase[Any],
        /,
        *,
        after: Iterable[Step],
        opts: EnqueueOpts | None = None,
        **kwargs: Any,
    ) -> Step: ...
    @overload
    def add(
        self,
        task: TaskBase[Any],
        /,
        *,
        opts: EnqueueOpts,
        after: Iterable[Step] = (),
        **kwargs: Any,
    ) -> Step: ...
    # As Task.defer: mypy cannot match the hidden positional-only parameter of
    # the first overload; the implementation takes every call the overloads allow.
    def add(self, task: Any, /, *args: Any, **kwargs: Any) -> Step:
        """A step running ``task`` with ``kwargs`` (checked as ``task.defer`` checks them)
        after the steps in ``after=``, with ``opts=`` (EnqueueOpts) if given."""
        if not isinstance(task, TaskBase):
            raise TypeError(f"add takes a task, got {type(task).__name__}; see add_job")
        if args:
            raise TypeError(f"task {task.name!r}: add takes keyword arguments only")
        after = kwargs.pop("after", ())
        opts = kwargs.pop("opts", None)
        queue = task.queue
        return self._add(queue, task.payload(kwargs), after, opts, task.name)

    def add_job(
        self,
        queue: Queue | AsyncQueue,
        payload: bytes,
        *,
        after: Iterable[Step] = (),
        opts: EnqueueOpts | None = None,
    ) -> Step:
        """A step enqueuing ``payload`` on ``queue`` (a queue of this workflow's store)."""
        if not isinstance(queue, Queue | AsyncQueue):
            raise TypeError(f"add_job takes a Queue, got {type(queue).__name__}")
        return self._add(queue, payload, after, opts, queue.name)

    def _add(
        self,
        queue: Queue | AsyncQueue,
        payload: object,
        after: object,
        opts: EnqueueOpts | None,
        label: str,
    ) -> Step:
        if queue.store is not self._store:
            raise ValueError(
                f"workflow {self.name!r}: queue {queue.name!r} belongs to another store"
            )
        core = queue_parts(queue)[1] if isinstance(queue, Queue) else async_queue_parts(queue)[1]
        return self._core.add(core, payload, after, opts, label)

    def defer(self, *, session: SyncSession | AsyncSessionLike | None = None) -> R:
        """G1: write every step in one transaction (``session``'s, or the store's own).

        A ``Store``'s workflow returns the ``WorkflowRun``; an
        ``AsyncStore``'s returns an awaitable of it.  Everything G4 checks
        raises here (or at ``add``), before any SQL.
        """
        call = self._core.defer()
        store = self._store
        if isinstance(store, AsyncStore):
            if session is not None and not isinstance(session, AsyncSessionLike):
                raise TypeError(
                    "session must be an AsyncSession or AsyncConnection, "
                    f"got {type(session).__name__}"
                )

            async def deferred() -> WorkflowRun:
                return self._core.run(await store._run(call, session, atomic=True))

            return deferred()  # type: ignore[return-value]
        if session is not None and not isinstance(session, SyncSession):
            raise TypeError(
                f"session must be a Session or Connection, got {type(session).__name__}"
            )
        return self._core.run(store._run(call, session, atomic=True))  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r} steps={len(self._core._planned)}>"
