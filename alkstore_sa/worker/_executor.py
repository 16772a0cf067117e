"""The executor: runs a claimed job's handler and says how it ended (Q27, Q28).

It never calls the database: how the handler ended becomes an ``Outcome``
(``outcome_of`` for one that raised) that the completer settles.  What
happens to a job, by how its handler ended:

- returned: acked through the completer (batched); a session-scoped
  handler's session already acked it in its own transaction (Q28);
- raised ``FailJob``: dead-lettered with its error (Q19);
- raised ``RetryJob``: retried after its delay, or on the queue's curve when
  it gave none or one that is not a valid duration (Q17, Q18);
- raised ``SnoozeJob``: pending again after its delay, the attempt
  refunded, no error recorded (Z1);
- raised anything else: retried on the curve, the exception's text as the
  error (its type's name when the text is empty);
- ran past ``job_timeout``: retried like an exception; an async handler is
  cancelled, a sync one keeps its concurrency slot until it returns (a
  thread cannot be stopped);
- its claim was lost meanwhile (a heartbeat found it gone): not acked;
- its job was cancelled meanwhile (C1, ``_cancel``): ``cancelled``, whatever
  the handler did (an async one got ``CancelledError``); nothing recorded.

``_completer`` records each outcome (an outcome the database refuses or
cannot record is reported lost: the claim lapses and the job runs again);
``_outcomes`` words and counts it (B1).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from .._values import validate as v
from .._values.errors import FailJob, RetryJob, SnoozeJob
from .._values.job import Job
from .._values.opts import QueueOpts
from .._values.stamps import backoff_delay
from ._bounded import bounded, cut
from ._cancel import Running
from ._completer import Settler
from ._early_start import EarlyStart
from ._handlers import exception_text, stored_error
from ._heartbeats import Heartbeats
from ._outcomes import Outcome
from ._state import QueueState, RunState, Slot

__all__ = ["Executor", "consume_outcome", "outcome_of"]

log = logging.getLogger("alkstore_sa.worker")


class Executor:
    def __init__(self, run: RunState, heartbeats: Heartbeats, completer: Settler) -> None:
        self._run = run
        self._heartbeats = heartbeats
        self._completer = completer
        # C1: told of each job once held (started or in ``ready``); the supervisor's
        # ``Cancels.held`` stops one whose cancel came while its claim was in flight.
        self.on_held: Callable[[QueueState, Slot], None] = lambda qs, slot: None

    def start(self, qs: QueueState, job: Job) -> None:
        """Hold a claimed job: start its handler in a free slot, else queue it in ``ready``.

        A job whose claim came back after a stop waits in ``ready`` too: the
        shutdown gives it back unstarted (Q27: nothing new runs after a stop).
        """
        slot = Slot(job)
        if (
            qs.busy < self._run.settings.concurrency
            and not qs.ready
            and not self._run.stopping.is_set()
        ):
            self._begin(qs, slot)
            self.adopt(qs, slot)
        else:
            self._hold(slot, qs)
            qs.ready.append(slot)
            self.on_held(qs, slot)

    def early_start(self, qs: QueueState, n: int) -> EarlyStart | None:
        """For a claim of ``n`` jobs about to go out: what starts the first of them
        where the claim's reply lands, in the slots free now (None: none is).

        A ``Worker``'s claim runs on a thread of its own; started from there,
        a handler runs before the event loop has even seen the reply (L1:
        about 0.15 ms sooner than through the loop).  The producer then hands
        what it started to ``adopt`` -- or nothing, the claim having failed.
        """
        room = self._run.settings.concurrency - qs.busy
        if qs.ready or room <= 0:
            return None  # jobs claimed ahead go first (claim order)
        return EarlyStart(functools.partial(self._begin, qs), self._run.stopping, min(n, room))

    def adopt(self, qs: QueueState, slot: Slot) -> None:
        """Hold a job whose handler ``_begin`` started, and watch it in a task."""
        self._hold(slot, qs)
        self._watch(qs, slot)
        self.on_held(qs, slot)

    def _watch(self, qs: QueueState, slot: Slot) -> None:
        """Watch a started handler in a task, to its outcome."""
        loop = self._run.loop
        if slot.fut is None:  # starting it raised (e.g. calling an async handler did)
            assert slot.start_error is not None
            slot.fut = loop.create_future()
            slot.fut.set_exception(slot.start_error)
            slot.start_error = None
        task = loop.create_task(self._execute(qs, slot), name=f"alkstore-job-{slot.job.id}")
        slot.task = task
        self._run.jobs.add(task)
        task.add_done_callback(self._job_done)

    def _hold(self, slot: Slot, qs: QueueState) -> None:
        qs.held[slot.key] = slot
        self._heartbeats.track(slot)  # a job waiting in ready keeps its claim too

    def _start_ready(self, qs: QueueState) -> None:
        """Fill free slots from the jobs claimed ahead (never after a stop: those go back)."""
        concurrency = self._run.settings.concurrency
        while qs.ready and qs.busy < concurrency and not self._run.stopping.is_set():
            slot = qs.ready.popleft()
            if slot.lost:  # a heartbeat found its claim gone while it waited
                qs.held.pop(slot.key, None)
                self._completer.reports.lost(qs, slot, "before its handler started; not run")
                continue
            self._begin(qs, slot)
            self._watch(qs, slot)

    def _free(self, qs: QueueState, slot: Slot) -> None:
        qs.free(slot, self._run.loop.time())
        self._start_ready(qs)

    def _begin(self, qs: QueueState, slot: Slot) -> None:
        """Start ``slot``'s handler now, in a slot it takes.  Safe on any thread when
        the port's ``start`` is (``early_start``): of the run's state it only
        reads the observers, and takes the slot under ``busy_lock``."""
        qs.take()  # before it runs: ``health().busy`` never counts it late
        slot.started = True
        slot.started_at = self._run.loop.time()  # the monotonic clock: any thread
        try:
            slot.fut = qs.port.start(slot.job, self._scope(slot))
        except Exception as exc:  # an outcome like any (``adopt`` makes it one)
            slot.start_error = exc

    def _scope(self, slot: Slot) -> AbstractContextManager[object]:
        """The scope around the handler's run: ``job_cancelled()``'s (C1), then the
        observers' (B3 spans)."""
        running = Running(slot)
        if not self._run.observers:
            return running
        job = slot.job
        scopes = [
            scope
            for observer in self._run.observers
            if (scope := observer.handler_scope(job)) is not None
        ]
        return _nested([running, *scopes]) if scopes else running

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._run.jobs.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker task %s crashed", task.get_name(), exc_info=task.exception())

    async def _wait(self, qs: QueueState, slot: Slot) -> bool:
        """Wait for the handler; ``False`` when it ran past ``job_timeout``."""
        assert slot.fut is not None
        timeout = self._run.settings.job_timeout
        loop = self._run.loop
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                left = None if deadline is None else max(deadline - loop.time(), 0.0)
                done, _ = await asyncio.wait({slot.fut}, timeout=left)
                if not done:
                    return False
                fut = slot.fut
                if fut.cancelled() or fut.exception() is not None:
                    slot.ran_for = loop.time() - slot.started_at
                    return True
                result = fut.result()
                if not inspect.isawaitable(result):
                    slot.ran_for = loop.time() - slot.started_at
                    return True
                # Called as sync, it returned an awaitable (an ``async def``
                # behind a sync decorator): its body has not run yet.
                slot.fut = qs.port.follow(result)
        finally:
            # On cancellation (shutdown gave up) the outcome is not ours to record.
            slot.running = False
            self._run.progress.set()

    async def _execute(self, qs: QueueState, slot: Slot) -> None:
        if await self._wait(qs, slot):
            assert slot.ran_for is not None
            qs.ran(slot.ran_for, self._run.settings.concurrency)
            self._free(qs, slot)
            outcome = self._ended(qs, slot)
        else:
            outcome = self._timed_out(qs, slot)
        slot.finishing = True
        try:
            await self._completer.settle(qs, slot, outcome)
        finally:
            qs.held.pop(slot.key, None)

    def _ended(self, qs: QueueState, slot: Slot) -> Outcome:
        """How the handler that returned or raised ended, as an outcome to settle."""
        fut = slot.fut
        assert fut is not None
        if slot.cancelled:  # C1: whatever it did, nothing is recorded
            consume_outcome(fut)
            return CANCELLED
        try:
            exc = fut.exception()
        except asyncio.CancelledError as cancelled:
            exc = cancelled
        if exc is not None:
            return outcome_of(qs.binding.core.opts, slot.job, exc)
        if qs.binding.handler.wants_session:
            if fut.result() is True:
                return ACKED_BY_SESSION
            return Outcome("lost", why="before the ack; the handler's writes rolled back")
        if slot.lost:
            return Outcome("lost", why="while the handler ran; not acked")
        if slot.job.keep_completed is not None:  # R2: its return value is the result
            value = fut.result()
            if value is not None and not isinstance(value, bytes | bytearray | memoryview):
                error = TypeError(
                    f"handler returned a {type(value).__name__}; a job that keeps its "
                    "result takes bytes or None"
                )
                return outcome_of(qs.binding.core.opts, slot.job, error)
            return Outcome("acked", result=None if value is None else bytes(value))
        return ACKED

    def _timed_out(self, qs: QueueState, slot: Slot) -> Outcome:
        """A handler past ``job_timeout`` failed like an exception (Q27)."""
        slot.finishing = True
        fut = slot.fut
        assert fut is not None
        timeout = self._run.settings.job_timeout
        assert timeout is not None
        slot.ran_for = timeout
        if isinstance(fut, asyncio.Task):
            fut.cancel()
        self._watch_stuck(qs, slot, timeout)
        delay = backoff_delay(qs.binding.core.opts, slot.job.attempts)
        text = f"job timed out after {timeout:g} s"
        return Outcome("retry", text, delay, timed_out=True)

    def _watch_stuck(self, qs: QueueState, slot: Slot, timeout: float) -> None:
        """B5: a handler still running past ``job_timeout`` is stuck until it returns.

        A sync handler's thread cannot be stopped: its slot stays taken until
        it returns, so the worker never runs more than ``concurrency`` at
        once; meanwhile it is counted in ``health().stuck`` and logged once
        per ``job_timeout``.
        """
        fut = slot.fut
        assert fut is not None
        run = self._run
        run.stuck.add(slot)
        job = slot.job

        def still_running(times: int) -> None:
            if fut.done():
                return
            log.warning(
                "job %d on %s: its handler is still running %gs after it timed out "
                "(its slot stays taken until it returns)",
                job.id,
                qs.name,
                times * timeout,
                extra={"alkstore_queue": qs.name, "alkstore_job_id": job.id},
            )
            handles[0] = run.loop.call_later(timeout, still_running, times + 1)

        handles = [run.loop.call_later(timeout, still_running, 1)]

        def handler_returned(f: asyncio.Future[object]) -> None:
            consume_outcome(f)
            handles[0].cancel()
            run.stuck.discard(slot)
            self._free(qs, slot)

        fut.add_done_callback(handler_returned)


@contextlib.contextmanager
def _nested(scopes: list[AbstractContextManager[object]]) -> Iterator[None]:
    """Several observers' scopes as one, entered where the handler runs (not here)."""
    with contextlib.ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(scope)
        yield


ACKED = Outcome("acked")
CANCELLED = Outcome("cancelled")
ACKED_BY_SESSION = Outcome("acked", by_session=True)


def outcome_of(opts: QueueOpts, job: Job, exc: BaseException) -> Outcome:
    """The rule for a handler that raised (Q27), in one place: ``FailJob``
    dead-letters now; ``RetryJob`` retries after its delay (the curve when it
    gave none or an invalid one); anything else retries on the curve."""
    if isinstance(exc, SnoozeJob):  # Z1: not a failure, no error, no traceback
        return Outcome("snoozed", delay=exc.delay, exc=exc)
    trace = bounded(exc)
    if isinstance(exc, FailJob):
        return Outcome("dead", stored_error(exc.error), exc=exc, trace=trace)
    if isinstance(exc, RetryJob):
        asked = _retry_delay(job, exc.delay)
        text = stored_error(exc.error)
    else:
        asked, text = None, exception_text(exc)
    delay = backoff_delay(opts, job.attempts) if asked is None else asked
    return Outcome("retry", text, delay, exc=exc, trace=trace)


def _retry_delay(job: Job, delay: object) -> float | None:
    """A ``RetryJob`` delay in seconds; None (the curve) when it is not a valid one."""
    if delay is None:
        return None
    try:
        return v.duration(delay, "delay", allow_zero=True)
    except (TypeError, ValueError) as bad:
        log.warning(
            "job %d: RetryJob delay %s refused (%s); using the curve", job.id, cut(repr(delay)), bad
        )
        return None


def consume_outcome(fut: asyncio.Future[object]) -> None:
    """Retrieve an abandoned handler's outcome so asyncio does not warn about it."""
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("abandoned handler finished with %r", fut.exception())
