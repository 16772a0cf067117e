"""Helpers for your own tests (D2): run due jobs now, list pending ones.

``run_due(target)`` runs every due job of a queue (its handler given as
``handler=``) or of a worker (its queues and handlers), in the calling
thread, until no job is due, and says what became of each; no worker
runtime, no LISTEN, no timers::

    report = run_due(emails, handler=send_email)
    assert report.acked == [job_id]

    report = run_due(worker)            # the Worker's own queues and handlers

For an ``AsyncQueue`` or an ``AsyncWorker`` the same call returns a
coroutine: ``report = await run_due(worker)``, run on the caller's event
loop (a plain sync handler of an ``AsyncWorker`` runs in a thread, as the
worker runs it).  ``enqueued(queue)`` likewise: a list, or a coroutine for
an ``AsyncQueue``.

The outcomes follow the worker's rules exactly, through the worker's own
code: its executor runs each job and its settler records the outcome (only
without the ack batching): a handler that returns is acked; ``FailJob``
dead-letters; ``RetryJob`` and any other exception retry on the queue's
curve (or the asked delay), the last attempt dead-lettering instead; a
session-scoped handler's writes commit with its ack (Q28).  A sync target's
handlers run in the calling thread (in a thread of their own when
``run_due`` is called from a running event loop's thread).

"Until no job is due" includes jobs the handlers enqueue, and retries that
are due at once: ``RetryJob(delay=0)``, or a first retry on the default
curve (``retry_base=1`` draws the first delay from 0-1 s, Q17).  Such a job
runs again in the same call until it succeeds or runs out of attempts --
as a real worker would run it.  To see one retry in a report, give the
queue ``retry_base=2`` or more (a first delay of 1-2 s), or pass
``limit=`` (at most that many handler runs).  Jobs run one at a time, each
claimed with ``claim_batch(worker_id, 1)`` under the worker id
``alkstore-testing``, in claim order (Q9), queue after queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, overload

from ._db.ops import Released
from ._values.job import Job
from .aio import AsyncQueue, AsyncStore
from .store import Queue, Store
from .tasks import Tasks
from .tasks._dispatch import handlers_for
from .worker import AsyncWorker, Worker
from .worker._completer import Settler
from .worker._executor import Executor
from .worker._handlers import HandlerSpec, inspect_handler
from .worker._heartbeats import Heartbeats
from .worker._outcomes import Outcome
from .worker._state import QueueState, RunState, Settings, Slot
from .worker._store_port import StoreBackend
from .worker._worker import handled

__all__ = ["WORKER_ID", "RunReport", "enqueued", "run_due"]

WORKER_ID = "alkstore-testing"
# enqueued() pages through pending jobs this many at a time (jobs()' maximum).
_PAGE = 1000
# The worker settings run_due runs the executor with: one job at a time, no timeout.
_SETTINGS = Settings(
    worker_id=WORKER_ID,
    concurrency=1,
    poll_interval=1.0,
    shutdown_timeout=0.0,
    job_timeout=None,
    sweep_interval=None,
    vacuum_interval=None,
    handle_signals=False,
)


@dataclass(frozen=True)
class RunReport:
    """What ``run_due`` did: the job ids by outcome, in the order they ran.

    A job retried and then run again in the same call appears once per run
    (``retried`` first, then ``acked`` or ``dead``).  ``lost``: runs whose
    outcome the database refused because the claim was gone (the handler
    cancelled its own job, say).  ``errors``: the exception each failed run
    raised, by job id (the last one, for a job that failed more than once).
    ``snoozed``: runs whose handler raised ``SnoozeJob`` (the job is pending
    again; one snoozed with no delay runs again in the same call).
    """

    acked: list[int] = field(default_factory=list)
    retried: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    snoozed: list[int] = field(default_factory=list)  # Z1: put back by SnoozeJob
    cancelled: list[int] = field(default_factory=list)  # C1: cancelled while running
    errors: dict[int, BaseException] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """How many handler runs there were."""
        return (
            len(self.acked)
            + len(self.retried)
            + len(self.dead)
            + len(self.lost)
            + len(self.snoozed)
            + len(self.cancelled)
        )


SyncTarget = Queue | Worker | Tasks[Store]
AsyncTarget = AsyncQueue | AsyncWorker | Tasks[AsyncStore]


@overload
def run_due(
    target: SyncTarget, *, limit: int | None = None, handler: Callable[..., Any] | None = None
) -> RunReport: ...


@overload
def run_due(
    target: AsyncTarget, *, limit: int | None = None, handler: Callable[..., Any] | None = None
) -> Coroutine[Any, Any, RunReport]: ...


def run_due(
    target: SyncTarget | AsyncTarget,
    *,
    limit: int | None = None,
    handler: Callable[..., Any] | None = None,
) -> RunReport | Coroutine[Any, Any, RunReport]:
    """Run every due job of ``target`` now and report the outcomes.

    ``target``: a ``Queue`` with ``handler=``, a ``Worker`` (its queues
    and handlers; ``handler=`` is refused) or a ``Tasks`` registry (its
    queues, each job dispatched by task name as ``Worker(tasks)`` does).  An
    ``AsyncQueue``, ``AsyncWorker`` or a registry on an ``AsyncStore`` gives
    a coroutine to await.  ``limit``: at most this many
    handler runs (None: until no job is due).  Everything is checked before
    the first claim.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"run_due: limit must be an int >= 0 or None, got {limit!r}")
    pairs = _pairs(target, handler)
    if isinstance(target, AsyncQueue | AsyncWorker) or (
        isinstance(target, Tasks) and target.is_async
    ):
        return _run(pairs, limit)
    return _run_sync(pairs, limit)


def _pairs(target: object, handler: Callable[..., Any] | None) -> list[tuple[Any, HandlerSpec]]:
    """``target`` as (queue, handler) pairs, validated as the worker validates them.

    The one place that knows the kinds of target.
    """
    if isinstance(target, Tasks):  # T2: its queues, each with the dispatching handler
        if handler is not None:
            raise TypeError("run_due: a Tasks registry runs its own tasks; do not pass handler=")
        dispatch = handlers_for(target, is_async=target.is_async)
        if not dispatch:
            raise ValueError("run_due: the Tasks registry has no tasks")
        return [(q, inspect_handler(fn, f"run_due queue {q.name!r}")) for q, fn in dispatch.items()]
    if isinstance(target, Worker | AsyncWorker):
        if handler is not None:
            raise TypeError("run_due: a worker brings its own handlers; do not pass handler=")
        return handled(target)
    if isinstance(target, Queue | AsyncQueue):
        if handler is None:
            raise TypeError(f"run_due: queue {target.name!r} needs handler=")
        spec = inspect_handler(handler, f"run_due queue {target.name!r}")
        if isinstance(target, Queue) and spec.is_async:
            raise TypeError(
                f"run_due: handler {spec.name} is async; a Queue's handler must be sync "
                "(use an AsyncQueue and await run_due)"
            )
        if isinstance(target, AsyncQueue) and spec.wants_session and not spec.is_async:
            raise TypeError(
                f"run_due: session-scoped handler {spec.name} of an AsyncQueue must be async "
                "(it gets an AsyncSession)"
            )
        return [(target, spec)]
    raise TypeError(
        "run_due takes a Queue or AsyncQueue (with handler=), a Worker or AsyncWorker, "
        "or a Tasks registry, "
        f"got {type(target).__name__}"
    )


class _Tally:
    """The report of one ``run_due``: where its settled outcomes go (``Reports``)."""

    def __init__(self, limit: int | None) -> None:
        self.report = RunReport()
        self._left = limit

    def more(self) -> bool:
        return self._left is None or self._left > 0

    def ran(self) -> None:
        if self._left is not None:
            self._left -= 1

    def _error(self, slot: Slot, outcome: Outcome | None) -> None:
        if outcome is not None and outcome.exc is not None:
            self.report.errors[slot.job.id] = outcome.exc

    def acked(self, qs: QueueState, slot: Slot, *, by_session: bool = False) -> None:
        self.report.acked.append(slot.job.id)

    def retried(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        self._error(slot, outcome)
        self.report.retried.append(slot.job.id)

    def dead(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        self._error(slot, outcome)
        self.report.dead.append(slot.job.id)

    def lost(self, qs: QueueState, slot: Slot, why: str, outcome: Outcome | None = None) -> None:
        self._error(slot, outcome)
        self.report.lost.append(slot.job.id)

    def released(self, qs: QueueState, slot: Slot, result: Released | None) -> None:
        self.report.lost.append(slot.job.id)  # never here: run_due has no shutdown

    def snoozed(self, qs: QueueState, slot: Slot, outcome: Outcome) -> None:
        self.report.snoozed.append(slot.job.id)

    def cancelled(self, qs: QueueState, slot: Slot) -> None:
        self.report.cancelled.append(slot.job.id)


def _run_sync(pairs: list[tuple[Any, HandlerSpec]], limit: int | None) -> RunReport:
    """``_run`` on a loop of its own in this thread: its calls and handlers run inline."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _on_new_loop(pairs, limit)
    # Called from a coroutine: this thread's loop is busy, so a thread of its own.
    with ThreadPoolExecutor(1, thread_name_prefix="alkstore-run-due") as pool:
        return pool.submit(_on_new_loop, pairs, limit).result()


def _on_new_loop(pairs: list[tuple[Any, HandlerSpec]], limit: int | None) -> RunReport:
    # Not asyncio.run: the caller's current event loop, if it set one, stays.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_run(pairs, limit))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _run(pairs: list[tuple[Any, HandlerSpec]], limit: int | None) -> RunReport:
    """The worker's own executor and settler, one claim of one job at a time."""
    tally = _Tally(limit)
    backend = StoreBackend(1, 1, inline=True)
    try:
        queues = [QueueState(backend.bind(queue, spec)) for queue, spec in pairs]
        run = RunState(_SETTINGS, queues, asyncio.get_running_loop())
        executor = Executor(run, Heartbeats(run), Settler(run, tally))
        ran_any = True
        while ran_any and tally.more():  # passes over the queues until none had a due job
            ran_any = False
            for qs in queues:
                while tally.more():
                    jobs = await qs.port.claim(WORKER_ID, 1)
                    if not jobs:
                        break
                    ran_any = True
                    tally.ran()
                    executor.start(qs, jobs[0])
                    task = qs.held[(jobs[0].id, jobs[0].attempts)].task
                    assert task is not None  # started at once: the one slot was free
                    await task
    finally:
        backend.close()
    return tally.report


@overload
def enqueued(queue: Queue) -> list[Job]: ...


@overload
def enqueued(queue: AsyncQueue) -> Coroutine[Any, Any, list[Job]]: ...


def enqueued(queue: Queue | AsyncQueue) -> list[Job] | Coroutine[Any, Any, list[Job]]:
    """Every pending job of ``queue`` (due or not), oldest first (by id).

    A coroutine for an ``AsyncQueue``.  Claimed (``processing``) and dead
    jobs are not listed: ``queue.jobs(status)`` has them.
    """
    if isinstance(queue, AsyncQueue):
        return _enqueued_async(queue)
    if not isinstance(queue, Queue):
        raise TypeError(f"enqueued takes a Queue or AsyncQueue, got {type(queue).__name__}")
    found: list[Job] = []
    before: int | None = None
    while page := queue.jobs("pending", limit=_PAGE, before=before):
        found.extend(page)
        before = page[-1].id
    return found[::-1]


async def _enqueued_async(queue: AsyncQueue) -> list[Job]:
    found: list[Job] = []
    before: int | None = None
    while page := await queue.jobs("pending", limit=_PAGE, before=before):
        found.extend(page)
        before = page[-1].id
    return found[::-1]
