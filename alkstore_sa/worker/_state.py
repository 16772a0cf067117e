"""What a worker run keeps per queue and per claimed job, and its settings."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

from .._core import HandleCore, QueueCore
from .._job import Job
from ._handlers import HandlerSpec

__all__ = ["SETTLE_FIRST", "QueueSpec", "QueueState", "Settings", "Slot"]

SETTLE_FIRST = 0.002  # a backlog's free slot waits about one claim round trip (seconds)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue a worker serves: its store, identity and handler."""

    store: Any  # Store or AsyncStore
    core: QueueCore
    handler: HandlerSpec


@dataclass(frozen=True, slots=True)
class Settings:
    worker_id: str
    concurrency: int
    poll_interval: float
    shutdown_timeout: float
    job_timeout: float | None
    handle_signals: bool


@dataclass(eq=False)
class Slot:
    """One claimed job from claim to outcome."""

    job: Job
    core: HandleCore
    beat_every: float
    next_beat: float
    fut: asyncio.Future[Any] | None = None
    task: asyncio.Task[None] | None = None
    running: bool = True  # its handler has not returned yet
    freed: bool = False  # its concurrency slot was given back
    finishing: bool = False  # an outcome (ack/retry/fail/release) is under way
    lost: bool = False  # a heartbeat found the claim gone

    @property
    def key(self) -> tuple[int, int]:
        return (self.job.id, self.job.attempts)


@dataclass(eq=False)
class QueueState:
    spec: QueueSpec
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    woken: bool = False  # a wake or re-poll: claim what is free, now
    backlog: bool = False  # the last claim came back full: refill in batches
    busy: int = 0  # slots taken by running handlers
    claiming: int = 0  # slots reserved by the claim in flight
    free_since: float = math.inf  # loop time a slot first freed since the last claim
    settle: float = SETTLE_FIRST  # how long a backlog's free slot waits for company
    held: dict[tuple[int, int], Slot] = field(default_factory=dict)

    @property
    def core(self) -> QueueCore:
        return self.spec.core

    @property
    def store(self) -> Any:
        return self.spec.store

    def wake(self) -> None:
        self.woken = True
        self.signal.set()
