"""What a worker run keeps: its settings, and its state per queue and per claimed job."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from .._core import HandleCore, QueueCore
from .._job import Job
from ._handlers import HandlerSpec
from ._port import ClaimKey, QueuePort

__all__ = ["SETTLE_FIRST", "QueueBinding", "QueueState", "RunState", "Settings", "Slot"]

SETTLE_FIRST = 0.002  # a backlog's free slot waits about one claim round trip (seconds)


@dataclass(frozen=True, slots=True)
class Settings:
    worker_id: str
    concurrency: int
    poll_interval: float
    shutdown_timeout: float
    job_timeout: float | None
    sweep_interval: float | None  # None: this worker never sweeps (O7)
    handle_signals: bool


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
    handle: HandleCore
    beat_every: float = 0.0  # set by Heartbeats.track
    next_beat: float = 0.0  # loop time of its next heartbeat
    fut: asyncio.Future[object] | None = None
    task: asyncio.Task[None] | None = None
    running: bool = True  # its handler has not returned yet
    freed: bool = False  # its concurrency slot was given back
    finishing: bool = False  # an outcome (ack/retry/fail/release) is under way
    lost: bool = False  # a heartbeat found the claim gone

    @property
    def key(self) -> ClaimKey:
        return (self.job.id, self.job.attempts)


@dataclass(eq=False)
class QueueState:
    """One queue during one run: its free slots, wake state and held claims."""

    binding: QueueBinding
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    woken: bool = False  # a wake or re-poll: claim what is free, now
    backlog: bool = False  # the last claim came back full: refill in batches
    busy: int = 0  # slots taken by running handlers
    claiming: int = 0  # slots reserved by the claim in flight
    free_since: float = math.inf  # loop time a slot first freed since the last claim
    settle: float = SETTLE_FIRST  # how long a backlog's free slot waits for company
    held: dict[ClaimKey, Slot] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.binding.core.name

    @property
    def port(self) -> QueuePort:
        return self.binding.port

    def wake(self) -> None:
        self.woken = True
        self.signal.set()

    def free(self, slot: Slot, now: float) -> None:
        """Give ``slot``'s concurrency slot back (once), and tell the producer."""
        if not slot.freed:
            slot.freed = True
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

    def held(self) -> list[Slot]:
        return [slot for qs in self.queues for slot in qs.held.values()]
