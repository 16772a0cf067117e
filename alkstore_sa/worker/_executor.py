"""The executor: runs a claimed job's handler and records its outcome (Q27, Q28).

What happens to a job, by how its handler ended:

- returned: acked through the completer (batched); a session-scoped
  handler's session already acked it in its own transaction (Q28);
- raised ``FailJob``: dead-lettered with its error (Q19);
- raised ``RetryJob``: retried after its delay, or on the queue's curve when
  it gave none or one that is not a valid duration (Q17, Q18);
- raised anything else: retried on the curve, the exception's text as the
  error (its type's name when the text is empty);
- ran past ``job_timeout``: retried like an exception; an async handler is
  cancelled, a sync one keeps its concurrency slot until it returns (a
  thread cannot be stopped);
- its claim was lost meanwhile (a heartbeat found it gone): not acked.

An outcome the database refuses (the claim lapsed) or cannot record (the
database is away) is logged; the claim then lapses and the job runs again
(at least once).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable

from .. import _validate as v
from .._core import HandleCore
from .._errors import FailJob, HandleSpentError, RetryJob
from .._job import Job
from ._completer import Completer
from ._handlers import exception_text, stored_error
from ._heartbeats import Heartbeats
from ._state import QueueState, RunState, Slot

__all__ = ["Executor", "consume_outcome"]

log = logging.getLogger("alkstore_sa.worker")


class Executor:
    def __init__(self, run: RunState, heartbeats: Heartbeats, completer: Completer) -> None:
        self._run = run
        self._heartbeats = heartbeats
        self._completer = completer

    def start(self, qs: QueueState, job: Job) -> None:
        """Take a concurrency slot, start the handler now, and watch it in a task."""
        slot = Slot(job, HandleCore(qs.binding.core, job))
        qs.busy += 1
        qs.held[slot.key] = slot
        self._heartbeats.track(slot)
        # The handler starts now, not on the task's first step: one loop pass sooner.
        try:
            fut = qs.port.start(slot.handle)
        except Exception as exc:  # e.g. calling an async handler raised: an outcome like any
            fut = self._run.loop.create_future()
            fut.set_exception(exc)
        slot.fut = fut
        task = self._run.loop.create_task(self._execute(qs, slot), name=f"alkstore-job-{job.id}")
        slot.task = task
        self._run.jobs.add(task)
        task.add_done_callback(self._job_done)

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
                    return True
                result = fut.result()
                if not inspect.isawaitable(result):
                    return True
                # Called as sync, it returned an awaitable (an ``async def``
                # behind a sync decorator): its body has not run yet.
                slot.fut = qs.port.follow(result)
        finally:
            # On cancellation (shutdown gave up) the outcome is not ours to record.
            slot.running = False
            self._run.progress.set()

    async def _execute(self, qs: QueueState, slot: Slot) -> None:
        if not await self._wait(qs, slot):
            await self._timed_out(qs, slot)
            return
        qs.free(slot, self._run.loop.time())
        fut = slot.fut
        assert fut is not None
        try:
            exc = fut.exception()
        except asyncio.CancelledError as cancelled:
            exc = cancelled
        slot.finishing = True
        try:
            if exc is None:
                await self._returned(qs, slot, fut.result())
            else:
                await self._raised(qs, slot, exc)
        finally:
            qs.held.pop(slot.key, None)

    async def _returned(self, qs: QueueState, slot: Slot, result: object) -> None:
        job = slot.job
        if qs.binding.handler.wants_session:
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
        if await self._completer.ack(qs, slot.key):
            log.debug("job %d done", job.id)
        else:
            log.warning("job %d finished but its claim was lost before the ack", job.id)

    async def _raised(self, qs: QueueState, slot: Slot, exc: BaseException) -> None:
        job = slot.job
        # A session handler that raised after its ack reached the database
        # (e.g. the commit failed) spent the handle; the claim is the same.
        handle = HandleCore(qs.binding.core, job) if slot.handle.spent else slot.handle
        if isinstance(exc, FailJob):
            text = stored_error(exc.error)
            log.info("job %d failed by its handler: %s", job.id, text)
            await self._record(slot, "fail", qs.port.fail(handle, text))
            return
        delay: float | None = None
        if isinstance(exc, RetryJob):
            text = stored_error(exc.error)
            delay = _retry_delay(job, exc.delay)
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
        await self._record(slot, "retry", qs.port.retry(handle, text, delay))

    async def _timed_out(self, qs: QueueState, slot: Slot) -> None:
        """A handler past ``job_timeout`` failed like an exception (Q27)."""
        slot.finishing = True
        fut = slot.fut
        assert fut is not None
        timeout = self._run.settings.job_timeout
        text = f"job timed out after {timeout:g} s"
        if isinstance(fut, asyncio.Task):
            fut.cancel()

        # A sync handler's thread cannot be stopped: its slot stays taken until
        # it returns, so the worker never runs more than ``concurrency`` at once.
        def handler_returned(f: asyncio.Future[object]) -> None:
            consume_outcome(f)
            qs.free(slot, self._run.loop.time())

        fut.add_done_callback(handler_returned)
        log.warning("job %d: %s; retrying", slot.job.id, text)
        try:
            await self._record(slot, "retry", qs.port.retry(slot.handle, text, None))
        finally:
            qs.held.pop(slot.key, None)

    async def _record(self, slot: Slot, what: str, outcome: Awaitable[bool]) -> None:
        try:
            ok = await outcome
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


def _retry_delay(job: Job, delay: object) -> float | None:
    """A ``RetryJob`` delay in seconds; None (the curve) when it is not a valid one."""
    if delay is None:
        return None
    try:
        return v.duration(delay, "delay", allow_zero=True)
    except (TypeError, ValueError) as bad:
        log.warning("job %d: RetryJob delay %r refused (%s); using the curve", job.id, delay, bad)
        return None


def consume_outcome(fut: asyncio.Future[object]) -> None:
    """Retrieve an abandoned handler's outcome so asyncio does not warn about it."""
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("abandoned handler finished with %r", fut.exception())
