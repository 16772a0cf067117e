"""Shutdown: the grace for in-flight handlers, then their jobs given back (Q27).

After a stop no new job is claimed, and jobs claimed ahead that have not
started (claimed ahead) go back at once, like a release.  Handlers still running get
``shutdown_timeout`` seconds to finish and have their outcome recorded; a
second stop ends the grace at once.  Past it, every job still running is
released (back to pending, due now, the attempt not refunded) so another
worker takes it without waiting for its lease to lapse -- or, on its last
attempt, dead-lettered as a lapse would (Q12); async handlers are
cancelled, sync ones are abandoned in their threads.  Then the completer's
acks are flushed.  Each step is bounded: a database that is away cannot
hold ``run()`` past ``RELEASE_TIMEOUT`` per step.  The releases are
outcomes like any, settled and reported by the completer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from ._completer import Completer, Settler
from ._executor import consume_outcome
from ._outcomes import Outcome
from ._state import QueueState, RunState, Slot

__all__ = ["ABORT_TIMEOUT", "RELEASE_TIMEOUT", "abort", "drain"]

log = logging.getLogger("alkstore_sa.worker")

RELEASE_TIMEOUT = 10.0  # how long shutdown waits for releases and pending acks
ABORT_TIMEOUT = 5.0  # the same when run() itself is cancelled: the canceller is waiting
RELEASED = Outcome("released")


async def drain(
    run: RunState,
    completer: Completer,
    producers: Collection[asyncio.Task[None]] = (),
    limit: float = RELEASE_TIMEOUT,
) -> None:
    """The grace, the releases, the last acks: everything after a stop.

    The producers end first: a claim in flight when the stop came still
    returns jobs, and they must be held (unstarted) before the releases run,
    or they would be left to lapse.  That wait is bounded too (half the
    limit): a claim that does not return by then is abandoned with its
    producer, and its jobs lapse.
    """
    loop = run.loop
    deadline = loop.time() + run.settings.shutdown_timeout
    claiming = [task for task in producers if not task.done()]
    if claiming:
        await asyncio.wait(claiming, timeout=limit / 2)
    await _release_unstarted(run, completer, limit)
    while not run.abandoning.is_set():
        left = deadline - loop.time()
        if left <= 0 or not any(slot.running for slot in run.held()):
            break
        run.progress.clear()
        try:
            await asyncio.wait_for(run.progress.wait(), left)
        except TimeoutError:
            break
    await _release_running(run, completer, limit)
    # Outcomes under way (acks, retries) finish; then the acks are flushed.
    finishing = [t for t in run.jobs if not t.done()]
    if finishing:
        await asyncio.wait(finishing, timeout=limit)
    if not await completer.drain(limit):
        log.warning(
            "worker %s: %d ack(s) not flushed at shutdown",
            run.settings.worker_id,
            completer.abandon(),
        )


async def abort(
    run: RunState, completer: Completer, producers: Collection[asyncio.Task[None]] = ()
) -> None:
    """Shut down with no grace, bounded by ``ABORT_TIMEOUT`` (run() is being cancelled)."""
    run.stopping.set()
    run.abandoning.set()
    for qs in run.queues:
        qs.signal.set()
    # A task of its own: a repeated cancel of run() cannot interrupt the
    # releases half way; it only stops waiting for them.
    task = run.loop.create_task(drain(run, completer, producers, ABORT_TIMEOUT))
    try:
        await asyncio.wait({task}, timeout=ABORT_TIMEOUT)
    except asyncio.CancelledError:
        log.warning("worker %s: cancelled again while releasing its jobs", run.settings.worker_id)
    if not task.done():
        task.cancel()
        log.warning("worker %s: releasing jobs at cancellation timed out", run.settings.worker_id)


async def _release_unstarted(run: RunState, completer: Settler, limit: float) -> None:
    """Give back the jobs claimed ahead that never started: nothing of theirs runs."""
    release: list[tuple[QueueState, Slot]] = []
    for qs in run.queues:
        while qs.ready:
            slot = qs.ready.popleft()
            slot.finishing = True
            release.append((qs, slot))
    await _release_all(completer, release, limit, "unstarted job(s)")


async def _release_running(run: RunState, completer: Settler, limit: float) -> None:
    """Past the grace: give running jobs back (pending, due now, attempt kept)."""
    release: list[tuple[QueueState, Slot]] = []
    handlers: list[asyncio.Future[object]] = []  # async handlers, cancelled here
    for qs in run.queues:
        for slot in list(qs.held.values()):
            if slot.running and not slot.finishing:
                slot.finishing = True
                if slot.task is not None:
                    slot.task.cancel()
                if slot.fut is not None:
                    if isinstance(slot.fut, asyncio.Task):
                        slot.fut.cancel()
                        handlers.append(slot.fut)
                    slot.fut.add_done_callback(consume_outcome)
                release.append((qs, slot))
    await _release_all(completer, release, limit, "job(s)")
    if handlers:
        # Their cancellation runs (finally blocks included) before run() returns.
        await asyncio.wait(handlers, timeout=limit)


async def _release_all(
    completer: Settler, release: list[tuple[QueueState, Slot]], limit: float, what: str
) -> None:
    if release:
        try:
            await asyncio.wait_for(
                asyncio.gather(*(_release(completer, qs, slot) for qs, slot in release)), limit
            )
        except TimeoutError:
            log.warning("releasing %d %s at shutdown timed out", len(release), what)


async def _release(completer: Settler, qs: QueueState, slot: Slot) -> None:
    try:
        if not slot.lost:  # else nothing of ours is left in the database to release
            await completer.settle(qs, slot, RELEASED)
    finally:
        qs.held.pop(slot.key, None)
