"""What a worker run keeps: its settings, and its state per queue and per claimed job."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import math
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from .._calls.core import QueueCore
from .._extras.instrument import Observer
from .._values.job import Job
from ._handlers import HandlerSpec
from ._port import ClaimKey, QueuePort

__all__ = [
    "AHEAD_MAX_RUN",
    "SETTLE_FIRST",
    "QueueBinding",
    "QueueState",
    "RunState",
    "Settings",
    "Slot",
    "WorkerHealth",
    "reraise_if_cancelled",
    "wait_until",
]

SETTLE_FIRST = 0.002  # a backlog's free slot waits about one claim round trip (seconds)
# Claim-ahead: a queue whose handlers take this long or less on average (seconds)
# claims one batch ahead of its free slots, so a claim's round trip overlaps
# the running handlers instead of following them.
AHEAD_MAX_RUN = 0.02


async def wait_until(event: asyncio.Event, deadline: float) -> None:
    """Wait for ``event`` to be set, or until loop time ``deadline``.

    Not ``asyncio.wait_for``: before Python 3.12 it runs the wait in a task
    of its own, so a ``set()`` reaches the waiter two loop passes later --
    on the wake path (L1), for the producer's idle wait.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            await event.wait()


def reraise_if_cancelled(exc: Exception) -> None:
    """Raise a cancellation of the current task that ``exc`` stands in for.

    An async database call cancelled half way (a shutdown cancelling a
    part of the run) can end in another error raised while SQLAlchemy
    cleans up (e.g. ``Can't reconnect until invalid transaction is rolled
    back``).  A part that logged it and carried on would never end, and
    ``run()`` would wait for it forever: every part's ``except Exception``
    calls this first.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


@dataclass(frozen=True, slots=True)
class Settings:
    worker_id: str
    concurrency: int
    poll_interval: float
    shutdown_timeout: float
    job_timeout: float | None
    sweep_interval: float | None  # None: this worker never sweeps (O7)
    vacuum_interval: float | None  # None: this worker never vacuums the jobs table
    handle_signals: bool
    # The most payload bytes one claim brings back (None: no bound).
    max_batch_payload_bytes: int | None = None


class WorkerHealth(NamedTuple):
    """A worker's health (B5), as ``Worker.health()`` reads it.

    ``running``: a run is under way and not stopping.  ``busy``: handlers
    running.  ``stuck``: handlers still running past ``job_timeout`` (their
    jobs were already retried).  ``last_claim_at``: when a claim round trip
    last succeeded (jobs or none: an idle healthy worker renews it every
    ``poll_interval``).  ``listener_connected``: LISTEN is established on
    every engine.  ``db_errors``: database calls failed in a row (0 once
    one succeeds).
    """

    running: bool
    busy: int
    stuck: int
    last_claim_at: datetime | None
    listener_connected: bool
    db_errors: int

    @property
    def healthy(self) -> bool:
        """What ``/healthz`` answers 200 for: running, the last database call
        succeeded, and no handler stuck (a stuck thread cannot be stopped:
        only a restart frees its slot)."""
        return self.running and self.db_errors == 0 and self.stuck == 0


@dataclass(frozen=True, slots=True)
class QueueBinding:
    """One queue a run serves: its identity, its handler and its database port."""

    core: QueueCore
    handler: HandlerSpec
    port: QueuePort


@dataclass(eq=False)
class Slot:
    """One claimed job from claim to outcome."""

    job: Job
    started_at: float = 0.0  # loop time the handler started
    ran_for: float | None = None  # seconds the handler ran, once it returned or timed out
    beat_every: float = 0.0  # set by Heartbeats.track
    next_beat: float = 0.0  # loop time of its next heartbeat
    fut: asyncio.Future[object] | None = None
    task: asyncio.Task[None] | None = None
    running: bool = True  # its handler has not returned yet (or not started)
    started: bool = False  # its handler was started (False while it waits in ``ready``)
    freed: bool = False  # its concurrency slot was given back
    finishing: bool = False  # an outcome (ack/retry/fail/release) is under way
    lost: bool = False  # a heartbeat found the claim gone
    cancelled: bool = False  # C1: its row was cancelled (``job_cancelled()`` reads it)
    start_error: Exception | None = None  # starting its handler raised (``Executor._begin``)

    @property
    def key(self) -> ClaimKey:
        return (self.job.id, self.job.attempts)


@dataclass(eq=False)
class QueueState:
    """One queue during one run: its free slots, wake state and held claims."""

    binding: QueueBinding
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    woken: bool = False  # a wake or re-poll: claim what is free, now
    # The database answered again (LISTEN re-established, or any call that
    # succeeded after failures): a claim backoff ends now, from its floor.
    answered: bool = False
    backlog: bool = False  # the last claim came back full: refill in batches
    # Slots taken by running handlers.  Changed under ``busy_lock``: a
    # ``Worker``'s claim thread takes slots too (``EarlyStart``), and
    # ``health()`` reads it from any thread.
    busy: int = 0
    busy_lock: threading.Lock = field(default_factory=threading.Lock)
    claiming: int = 0  # slots reserved by the claim in flight
    free_since: float = math.inf  # loop time a slot first freed since the last claim
    settle: float = SETTLE_FIRST  # how long a backlog's free slot waits for company
    held: dict[ClaimKey, Slot] = field(default_factory=dict)
    # Claimed ahead of a free slot, not started yet (held, heartbeated): at
    # most ``ahead`` of them, started in claim order as slots free up.
    ready: collections.deque[Slot] = field(default_factory=collections.deque)
    ahead: int = 0  # how many jobs may be claimed beyond the free slots now
    run_avg: float = math.inf  # a moving average of the handlers' run time (seconds)
    # V5: loop times jobs this run knows of come due (its own retries), a
    # heap: the producer claims at each, not a poll interval later.
    due_at: list[float] = field(default_factory=list)

    def ran(self, seconds: float, concurrency: int) -> None:
        """Count one handler's run time; claim ahead while handlers are short."""
        self.run_avg = (
            seconds if self.run_avg == math.inf else self.run_avg + (seconds - self.run_avg) / 8
        )
        self.ahead = concurrency if self.run_avg <= AHEAD_MAX_RUN else 0

    @property
    def name(self) -> str:
        return self.binding.core.name

    @property
    def port(self) -> QueuePort:
        return self.binding.port

    def wake(self) -> None:
        self.woken = True
        self.signal.set()

    def due(self, at: float) -> None:
        """V5: a job of this queue becomes claimable at loop time ``at``."""
        if at < self.next_due:
            self.signal.set()  # the producer's wait ends sooner now
        heapq.heappush(self.due_at, at)

    @property
    def next_due(self) -> float:
        """The earliest due time known, ``inf`` for none."""
        return self.due_at[0] if self.due_at else math.inf

    def came_due(self, now: float) -> bool:
        """Forget the due times up to ``now``; whether there were any."""
        came = False
        while self.due_at and self.due_at[0] <= now:
            heapq.heappop(self.due_at)
            came = True
        return came

    def take(self) -> None:
        """Take a concurrency slot for a handler about to start (any thread)."""
        with self.busy_lock:
            self.busy += 1

    def running(self) -> int:
        """How many handlers hold a slot now (any thread)."""
        with self.busy_lock:
            return self.busy

    def free(self, slot: Slot, now: float) -> None:
        """Give ``slot``'s concurrency slot back (once), and tell the producer."""
        if not slot.freed:
            slot.freed = True
            with self.busy_lock:
                self.busy -= 1
            if self.free_since == math.inf:
                self.free_since = now
            self.signal.set()


@dataclass(eq=False)
class RunState:
    """What one ``run()`` builds and its parts share; gone when the run ends."""

    settings: Settings
    queues: list[QueueState]
    loop: asyncio.AbstractEventLoop
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # no new claims
    abandoning: asyncio.Event = field(default_factory=asyncio.Event)  # no more grace
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # a handler returned
    jobs: set[asyncio.Task[None]] = field(default_factory=set)  # one task per claimed job
    observers: tuple[Observer, ...] = ()  # the instrumentation installed when the run began
    # B5, read by health():
    stuck: set[Slot] = field(default_factory=set)  # handlers running past job_timeout
    db_errors: int = 0  # consecutive failed database calls
    last_claim_at: datetime | None = None  # the last claim round trip that succeeded
    listeners: int = 0  # listener tasks (one per engine)
    listening: int = 0  # of which have LISTEN established
    # W2: outcomes not yet added to the throughput table, per queue: [acked, retried, dead].
    tallies: dict[QueueState, list[int]] = field(default_factory=dict)

    def held(self) -> list[Slot]:
        return [slot for qs in self.queues for slot in qs.held.values()]

    # Replaced by a fresh one each time the database answers after failures
    # (``database_answered``): a part sleeping out a backoff waits on it
    # (``backoff``), so no backoff computed during a fault outlives it.
    recovery: asyncio.Event = field(default_factory=asyncio.Event)
    recoveries: int = 0  # how many times that happened (the listener's backoff reads it)

    def db_ok(self) -> None:
        if self.db_errors:
            self.db_errors = 0
            self.database_answered()

    def database_answered(self) -> None:
        """The first success after failures: every backoff ends now and restarts from its floor."""
        self.recoveries += 1
        for qs in self.queues:
            qs.answered = True
            qs.wake()  # claim now: the wait was the backoff's, not the queue's
        ended, self.recovery = self.recovery, asyncio.Event()
        ended.set()

    async def backoff(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less if the database answers meanwhile (then True)."""
        recovery = self.recovery
        try:
            await asyncio.wait_for(recovery.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def db_failed(self) -> int:
        """Count one more failed database call in a row; returns the count."""
        self.db_errors += 1
        return self.db_errors
