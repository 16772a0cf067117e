"""The worker runtime: producers, executor, heartbeats, completer, shutdown.

One asyncio program serves both ``Worker`` (which drives it with
``asyncio.run`` in the calling thread) and ``AsyncWorker``.  Per queue a
*producer* claims as many jobs as the queue has free slots
(``concurrency``): right after LISTEN is established, on each notification,
after a full batch once every slot is free (or a free slot has waited about
one claim round trip), and on a re-poll timer
(``poll_interval``) that covers lost notifications and delayed jobs coming
due (SPEC Q26).  Each claimed job gets an *execute* task; a *heartbeat*
task extends every held claim at a third of its job's visibility timeout
while it runs, so a slow handler is never reclaimed (SPEC Q27); successful
jobs are acked in batches by the *completer*.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .._core import HandleCore
from .._errors import FailJob, HandleSpentError, RetryJob
from .._job import Job
from ._backend import Backend
from ._completer import Completer
from ._handlers import error_text, exception_text
from ._listener import Listener, listen_params
from ._state import QueueSpec, QueueState, Settings, Slot

__all__ = ["QueueSpec", "Runtime", "Settings"]

log = logging.getLogger("alkstore_sa.worker")

BEAT_FRACTION = 1 / 3  # heartbeat at this fraction of the job's visibility timeout
BEAT_RETRY = 0.25  # after a failed heartbeat, try again this soon (seconds, at most)
RELEASE_TIMEOUT = 10.0  # how long shutdown waits for releases and pending acks
ABORT_TIMEOUT = 5.0  # the same when run() itself is cancelled: the canceller is waiting
SETTLE_CAP = 0.05  # a backlog's free slot never waits longer than this for company


class Runtime:
    """One run of a worker.  ``stop()`` may be called from any thread."""

    def __init__(self, specs: list[QueueSpec], settings: Settings) -> None:
        self._specs = specs
        self._settings = settings
        self._backend: Backend
        # Reentrant: stop() may run from a signal handler on the thread holding it.
        self._lock = threading.RLock()
        self._stops = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._hard_event: asyncio.Event | None = None
        self._queues: list[QueueState] = []
        self._beat_changed: asyncio.Event | None = None
        self._beat_at = 0.0  # when the heartbeat task wakes next (loop time)
        self._progress: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.listeners: list[Listener] = []

    # -- control ---------------------------------------------------------------

    def stop(self) -> None:
        """Ask the run to stop; a second call skips the rest of the shutdown grace."""
        with self._lock:
            self._stops += 1
            loop = self._loop
        if loop is not None and not loop.is_closed():
            # RuntimeError: the loop closed in between, so the run is over.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._apply_stop)

    def _apply_stop(self) -> None:
        assert self._stop_event is not None and self._hard_event is not None
        with self._lock:
            stops = self._stops
        if stops >= 1 and not self._stop_event.is_set():
            log.info("worker %s stopping: no new claims", self._settings.worker_id)
            self._stop_event.set()
            for qs in self._queues:
                qs.signal.set()
        if stops >= 2 and not self._hard_event.is_set():
            log.info("worker %s: second stop, abandoning in-flight jobs", self._settings.worker_id)
            self._hard_event.set()
            self._notify_progress()

    @property
    def stop_requests(self) -> int:
        """How many times ``stop()`` was called (any thread)."""
        with self._lock:
            return self._stops

    @property
    def stopping(self) -> bool:
        return self._stop_event is not None and self._stop_event.is_set()

    # -- the run -----------------------------------------------------------------

    async def run(self, backend: Backend) -> None:
        """Run until stopped; ``backend`` is closed when the run ends."""
        self._backend = backend
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._hard_event = asyncio.Event()
        self._beat_changed = asyncio.Event()
        self._progress = asyncio.Event()
        self._queues = [QueueState(spec) for spec in self._specs]
        with self._lock:
            self._loop = loop
        self._apply_stop_if_requested()
        restore = self._install_signals(loop)
        completer = Completer(self._backend.ack)
        background = [
            loop.create_task(completer.run(), name="alkstore-completer"),
            loop.create_task(self._heartbeats(), name="alkstore-heartbeat"),
        ]
        listeners = [
            loop.create_task(lst.run(), name="alkstore-listener") for lst in self._make_listeners()
        ]
        producers = [
            loop.create_task(self._produce(qs, completer), name=f"alkstore-producer-{qs.core.name}")
            for qs in self._queues
        ]
        log.info(
            "worker %s started: %s (concurrency %d per queue, poll every %gs)",
            self._settings.worker_id,
            ", ".join(qs.core.name for qs in self._queues),
            self._settings.concurrency,
            self._settings.poll_interval,
        )
        crashed: BaseException | None = None
        try:
            stopped = loop.create_task(self._stop_event.wait())
            watched = {stopped, *producers, *background, *listeners}
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            for task in done - {stopped}:
                error = None if task.cancelled() else task.exception()
                if error is None and self.stopping:
                    continue  # a producer that saw the stop first
                # A runtime task never ends on its own: that is a bug, so stop
                # cleanly and let run() raise it rather than idle half-dead.
                crashed = error
                log.error("worker task %s ended unexpectedly", task.get_name(), exc_info=crashed)
                self.stop()
                self._apply_stop()
                break
            await asyncio.gather(*producers, return_exceptions=True)
            await self._cancel(listeners)
            await self._drain(completer)
        except BaseException:
            # run() itself was cancelled (or interrupted): no grace, but the
            # held jobs still go back at once rather than when their leases
            # lapse, and no handler task outlives run().
            await self._abort(completer)
            raise
        finally:
            await self._cancel(producers + listeners)
            for task in list(self._tasks):
                task.cancel()
            await self._cancel(background)
            restore()
            with self._lock:
                self._loop = None
            self._backend.close()
        if crashed is not None:
            raise crashed
        log.info("worker %s stopped", self._settings.worker_id)

    def _apply_stop_if_requested(self) -> None:
        with self._lock:
            requested = self._stops > 0
        if requested:
            self._apply_stop()

    @staticmethod
    async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """SIGTERM/SIGINT stop the worker, only when running on the main thread."""
        if (
            not self._settings.handle_signals
            or threading.current_thread() is not threading.main_thread()
        ):
            return lambda: None
        installed: list[tuple[signal.Signals, Any]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError, ValueError):  # not supported here
                continue
            installed.append((sig, previous))

        def restore() -> None:
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)

        return restore

    def _make_listeners(self) -> list[Listener]:
        """One listener per engine the queues' stores use (normally exactly one)."""
        groups: dict[int, list[QueueState]] = {}
        for qs in self._queues:
            groups.setdefault(id(qs.store.engine), []).append(qs)
        read_params = functools.partial(
            listen_params, application_name=f"alkstore {self._settings.worker_id}"
        )
        self.listeners = []
        for members in groups.values():
            by_channel = {qs.core.address.channel: qs for qs in members}

            def wake(channel: str, by_channel: dict[str, QueueState] = by_channel) -> None:
                qs = by_channel.get(channel)
                if qs is not None:
                    qs.wake()

            def listening(members: list[QueueState] = members) -> None:
                for qs in members:
                    qs.wake()  # SPEC Q26: claim once LISTEN is established

            def params(store: Any = members[0].store) -> Awaitable[dict[str, Any]]:
                return self._backend.run(store, read_params)

            self.listeners.append(Listener(params, list(by_channel), wake, listening))
        return self.listeners

    # -- producer ---------------------------------------------------------------

    async def _produce(self, qs: QueueState, completer: Completer) -> None:
        loop = asyncio.get_running_loop()
        settings = self._settings
        next_poll = loop.time() + settings.poll_interval
        while not self.stopping:
            now = loop.time()
            free = settings.concurrency - qs.busy - qs.claiming
            settle_at = next_poll
            if free > 0 and not qs.claiming and (qs.woken or qs.backlog):
                # A wake on a queue believed empty claims what is free at once:
                # a new job never waits.  A backlog (the last claim came back
                # full; wakes add nothing to that) is refilled when every slot
                # is free, or once a free slot has waited about one claim's
                # round trip: fast handlers get full claims (one round trip and
                # one plan per ``concurrency`` jobs), slow ones keep busy.
                settle_at = qs.free_since + qs.settle
                prompt = qs.woken and not qs.backlog
                if prompt or free == settings.concurrency or now >= settle_at:
                    qs.woken = qs.backlog = False
                    qs.claiming = free
                    qs.free_since = math.inf
                    # Inline, not a task: one claim at a time, and a wake's
                    # claim goes out in this very loop pass (SPEC Q26 latency).
                    await self._claim(qs, free, completer)
                    next_poll = loop.time() + settings.poll_interval
                    continue
            if next_poll <= now:
                qs.woken = True  # SPEC Q26: the re-poll
                next_poll = now + settings.poll_interval
                continue
            qs.signal.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(qs.signal.wait(), min(next_poll, settle_at) - now)

    async def _claim(self, qs: QueueState, n: int, completer: Completer) -> None:
        call = qs.core.claim(self._settings.worker_id, n)
        assert call is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            jobs = await self._backend.claim(qs.store, call)
            took = min(loop.time() - started, SETTLE_CAP)
            qs.settle += (took - qs.settle) / 4  # a moving average of the claim's round trip
        except Exception as exc:
            # Not woken again: the timer (or a wake) retries, no busy loop.
            log.warning("claim on %s failed: %s", qs.core.name, exc)
            jobs = []
        finally:
            qs.claiming -= n
        for job in jobs:
            self._start(qs, job, completer)
        if len(jobs) == n:
            qs.backlog = True  # a full batch: there may be more
        qs.signal.set()

    def _start(self, qs: QueueState, job: Job, completer: Completer) -> None:
        loop = asyncio.get_running_loop()
        beat_every = max(job.visibility_timeout * BEAT_FRACTION, 0.01)
        slot = Slot(job, HandleCore(qs.core, job), beat_every, loop.time() + beat_every)
        qs.busy += 1
        qs.held[slot.key] = slot
        if slot.next_beat < self._beat_at:  # only an earlier beat needs the heartbeat task
            assert self._beat_changed is not None
            self._beat_changed.set()
        # The handler starts now, not on the task's first step: one loop pass sooner.
        try:
            fut = self._backend.start(qs.store, qs.spec.handler, job, slot.core)
        except Exception as exc:  # e.g. calling an async handler raised: an outcome like any
            fut = loop.create_future()
            fut.set_exception(exc)
        slot.fut = fut
        task = loop.create_task(
            self._execute(qs, slot, fut, completer), name=f"alkstore-job-{job.id}"
        )
        slot.task = task
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker task %s crashed", task.get_name(), exc_info=task.exception())

    def _free(self, qs: QueueState, slot: Slot) -> None:
        if not slot.freed:
            slot.freed = True
            qs.busy -= 1
            if qs.free_since == math.inf:
                qs.free_since = asyncio.get_running_loop().time()
            qs.signal.set()

    def _notify_progress(self) -> None:
        if self._progress is not None:
            self._progress.set()

    # -- executor ---------------------------------------------------------------

    async def _execute(
        self, qs: QueueState, slot: Slot, fut: asyncio.Future[Any], completer: Completer
    ) -> None:
        timeout = self._settings.job_timeout
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                left = None if deadline is None else max(deadline - loop.time(), 0.0)
                done, _ = await asyncio.wait({fut}, timeout=left)
                if not done or fut.cancelled() or fut.exception() is not None:
                    break
                result = fut.result()
                if not inspect.isawaitable(result):
                    break
                # Called as sync, it returned an awaitable (an ``async def``
                # behind a sync decorator): its body has not run yet.
                fut = self._backend.follow(qs.spec.handler, result)
                slot.fut = fut
        finally:
            # On cancellation (shutdown gave up) the outcome is not ours to record.
            slot.running = False
            self._notify_progress()
        if not done:
            await self._timed_out(qs, slot, fut, timeout)
            return
        self._free(qs, slot)
        try:
            exc = fut.exception()
        except asyncio.CancelledError as cancelled:
            exc = cancelled
        try:
            if exc is None:
                await self._succeeded(qs, slot, fut.result(), completer)
            else:
                await self._raised(qs, slot, exc)
        finally:
            qs.held.pop(slot.key, None)

    async def _succeeded(
        self, qs: QueueState, slot: Slot, result: Any, completer: Completer
    ) -> None:
        slot.finishing = True
        job = slot.job
        if qs.spec.handler.wants_session:
            if result is True:
                log.debug("job %d done (acked with the handler's session)", job.id)
            else:
                log.warning(
                    "job %d: claim lost before the ack; the handler's writes were rolled back",
                    job.id,
                )
            return
        if slot.lost:
            log.warning("job %d finished after its claim was lost; not acked", job.id)
            return
        acked = await completer.ack(qs.store, qs.core, job.id, job.attempts)
        if acked:
            log.debug("job %d done", job.id)
        else:
            log.warning("job %d finished but its claim was lost before the ack", job.id)

    async def _raised(self, qs: QueueState, slot: Slot, exc: BaseException) -> None:
        slot.finishing = True
        job = slot.job
        # A session handler that raised after its ack reached the database
        # (e.g. the commit failed) spent the handle; the claim is the same.
        core = HandleCore(qs.core, job) if slot.core.spent else slot.core
        if isinstance(exc, FailJob):
            text = error_text(exc.error)
            log.info("job %d failed by its handler: %s", job.id, text)
            await self._finish(qs, slot, "fail", lambda: core.fail(text))
            return
        delay: Any = None
        if isinstance(exc, RetryJob):
            text = error_text(exc.error)
            delay = exc.delay
        else:
            text = exception_text(exc)
        log.info(
            "job %d (attempt %d/%d) raised %s: %s",
            job.id,
            job.attempts,
            job.max_attempts,
            type(exc).__name__,
            text,
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )
        try:
            make = core.retry(text, delay)
        except (TypeError, ValueError) as bad:
            log.warning(
                "job %d: RetryJob delay %r refused (%s); using the curve", job.id, delay, bad
            )
            make = core.retry(text, None)
        await self._finish(qs, slot, "retry", lambda: make)

    async def _timed_out(
        self, qs: QueueState, slot: Slot, fut: asyncio.Future[Any], timeout: float | None
    ) -> None:
        """SPEC Q27: a handler past ``job_timeout`` failed like an exception."""
        slot.finishing = True
        job = slot.job
        text = f"job timed out after {timeout:g} s"
        if isinstance(fut, asyncio.Task):
            fut.cancel()

        # A sync handler's thread cannot be stopped: its slot stays taken until
        # it returns, so the worker never runs more than ``concurrency`` at once.
        def handler_returned(f: asyncio.Future[Any]) -> None:
            _consume(f)
            self._free(qs, slot)

        fut.add_done_callback(handler_returned)
        log.warning("job %d: %s; retrying", job.id, text)
        try:
            try:
                call = slot.core.retry(text, None)
            except HandleSpentError:
                log.warning("job %d: handler finished its ack just at the timeout", job.id)
                return
            await self._finish(qs, slot, "retry", lambda: call)
        finally:
            qs.held.pop(slot.key, None)

    async def _finish(self, qs: QueueState, slot: Slot, what: str, make: Callable[[], Any]) -> None:
        try:
            ok = await self._backend.run(qs.store, make())
        except HandleSpentError:
            # Not a lost claim: the handler's session ack already used the handle.
            log.warning(
                "job %d: %s skipped, the handler's session ack already spent the handle",
                slot.job.id,
                what,
            )
            return
        except Exception as exc:
            # The claim lapses and the job is handed out again (at least once).
            log.warning("job %d: recording %s failed: %s", slot.job.id, what, exc)
            return
        if not ok:
            log.warning("job %d: %s refused, the claim was already lost", slot.job.id, what)

    # -- heartbeats ---------------------------------------------------------------

    async def _heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._beat_changed is not None
        while True:
            now = loop.time()
            slots = [s for qs in self._queues for s in qs.held.values() if not s.lost]
            wait = min(s.next_beat for s in slots) - now if slots else 3600.0
            if wait > 0:
                self._beat_at = now + wait
                self._beat_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._beat_changed.wait(), wait)
                continue
            self._beat_at = 0.0  # beating: whatever starts meanwhile re-checks
            await asyncio.gather(*(self._beat_queue(qs) for qs in self._queues))

    async def _beat_queue(self, qs: QueueState) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        # Beat everything at least halfway to its beat time: fewer round trips.
        due = [s for s in qs.held.values() if not s.lost and s.next_beat - s.beat_every / 2 <= now]
        if not due:
            return
        try:
            extended = set(
                await self._backend.run(qs.store, qs.core.heartbeat_claims([s.key for s in due]))
            )
        except Exception as exc:
            log.warning("heartbeat on %s failed: %s; retrying", qs.core.name, exc)
            for s in due:
                s.next_beat = now + min(BEAT_RETRY, s.beat_every / 2)
            return
        for s in due:
            if s.job.id in extended or s.finishing:
                # A finishing job's row may be gone already: its outcome says
                # what happened; just do not beat it again at once.
                s.next_beat = now + s.beat_every
            elif qs.held.get(s.key) is s:
                # Kept in ``held`` (not beaten, never acked): shutdown must still
                # cancel or abandon its handler within the grace.
                s.lost = True
                log.warning(
                    "job %d: heartbeat found its claim gone (lapsed, cancelled or "
                    "reclaimed); it will not be acked",
                    s.job.id,
                )

    # -- shutdown ---------------------------------------------------------------

    async def _drain(self, completer: Completer, limit: float = RELEASE_TIMEOUT) -> None:
        """SPEC Q27: in-flight handlers get ``shutdown_timeout`` to finish and be acked."""
        loop = asyncio.get_running_loop()
        assert self._progress is not None and self._hard_event is not None
        deadline = loop.time() + self._settings.shutdown_timeout
        while not self._hard_event.is_set():
            running = [s for qs in self._queues for s in qs.held.values() if s.running]
            left = deadline - loop.time()
            if not running or left <= 0:
                break
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), left)
            except TimeoutError:
                break
        await self._release_running(limit)
        # Outcomes under way (acks, retries) finish; then the acks are flushed.
        finishing = [t for t in self._tasks if not t.done()]
        if finishing:
            await asyncio.wait(finishing, timeout=limit)
        if not await completer.drain(limit):
            log.warning(
                "worker %s: %d ack(s) not flushed at shutdown",
                self._settings.worker_id,
                completer.abandon(),
            )

    async def _abort(self, completer: Completer) -> None:
        """Shut down with no grace, bounded by ``ABORT_TIMEOUT`` (run() is being cancelled)."""
        assert self._stop_event is not None and self._hard_event is not None
        self._stop_event.set()
        self._hard_event.set()
        for qs in self._queues:
            qs.signal.set()
        # A task of its own: a repeated cancel of run() cannot interrupt the
        # releases half way; it only stops waiting for them.
        abort = asyncio.get_running_loop().create_task(self._drain(completer, ABORT_TIMEOUT))
        try:
            await asyncio.wait({abort}, timeout=ABORT_TIMEOUT)
        except asyncio.CancelledError:
            log.warning(
                "worker %s: cancelled again while releasing its jobs", self._settings.worker_id
            )
        if not abort.done():
            abort.cancel()
            log.warning(
                "worker %s: releasing jobs at cancellation timed out", self._settings.worker_id
            )

    async def _release_running(self, limit: float = RELEASE_TIMEOUT) -> None:
        """Past the grace: give running jobs back (pending, due now, attempt kept)."""
        release: list[tuple[QueueState, Slot]] = []
        handlers: list[asyncio.Future[Any]] = []  # async handlers, cancelled here
        for qs in self._queues:
            for slot in list(qs.held.values()):
                if slot.running and not slot.finishing:
                    slot.finishing = True
                    if slot.task is not None:
                        slot.task.cancel()
                    if slot.fut is not None:
                        if isinstance(slot.fut, asyncio.Task):
                            slot.fut.cancel()
                            handlers.append(slot.fut)
                        slot.fut.add_done_callback(_consume)
                    release.append((qs, slot))

        async def one(qs: QueueState, slot: Slot) -> None:
            if slot.lost:  # nothing of ours left in the database to release
                qs.held.pop(slot.key, None)
                return
            try:
                ok = await self._backend.run(
                    qs.store, qs.core.release(slot.job.id, slot.job.attempts)
                )
            except Exception as exc:
                log.warning("job %d: release at shutdown failed: %s", slot.job.id, exc)
                return
            finally:
                qs.held.pop(slot.key, None)
            if ok:
                log.warning(
                    "job %d: still running at shutdown; released for other workers", slot.job.id
                )

        if release:
            try:
                await asyncio.wait_for(asyncio.gather(*(one(qs, s) for qs, s in release)), limit)
            except TimeoutError:
                log.warning("releasing %d job(s) at shutdown timed out", len(release))
        if handlers:
            # Their cancellation runs (finally blocks included) before run() returns.
            await asyncio.wait(handlers, timeout=limit)


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned handler's outcome so asyncio does not warn about it."""
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("abandoned handler finished with %r", fut.exception())
