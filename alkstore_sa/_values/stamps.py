"""What an enqueue stamps on a job (Q4) and how long a retry waits (Q17): pure values."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from .opts import EnqueueOpts, QueueOpts

__all__ = ["Stamps", "as_interval", "backoff_bounds", "backoff_delay", "resolve_stamps"]

_rng = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class Stamps:
    """An enqueue's options resolved over the queue's stamps (Q4)."""

    priority: int
    max_attempts: int
    visibility_timeout: timedelta
    run_at: datetime | None
    delay: timedelta
    expires_in: timedelta | None
    # R1: how long the job is kept once acked; None = deleted at its ack.
    keep_completed: timedelta | None = None
    # F3: the job's group; None for none.
    group: str | None = None
    # U2: a keyed enqueue replaces its key's pending job (on_conflict="replace").
    replace: bool = False


def resolve_stamps(queue: QueueOpts, job: EnqueueOpts | None) -> Stamps:
    """Q4: job options over queue stamps; ``delay`` wins over ``run_at``.

    The clock is read in SQL (once per statement), so this resolves only
    what is relative to it: ``delay``/``expires_in`` stay intervals.
    """
    job = job or EnqueueOpts()
    expires_in = job.expires_in if job.expires_in is not None else queue.expires_in
    keep = job.keep_completed if job.keep_completed is not None else queue.keep_completed
    return Stamps(
        priority=job.priority if job.priority is not None else queue.priority,
        max_attempts=job.max_attempts if job.max_attempts is not None else queue.max_attempts,
        visibility_timeout=as_interval(queue.visibility_timeout),
        run_at=job.run_at if job.delay is None else None,
        delay=as_interval(job.delay or 0),
        expires_in=None if expires_in is None else as_interval(expires_in),
        keep_completed=None if keep is None else as_interval(keep),
        group=job.group,
        replace=job.on_conflict == "replace",
    )


def backoff_bounds(opts: QueueOpts, attempts: int) -> tuple[int, int]:
    """Q17: the inclusive integer range a retry delay is drawn from.

    ``d = min(retry_cap, retry_base * 2**(k-1))``; range ``[floor(d/2), floor(d)]``.
    """
    exponent = min(max(attempts, 1) - 1, 64)  # past 2**64 the cap has long won
    d = min(float(_secs(opts.retry_cap)), float(_secs(opts.retry_base)) * 2.0**exponent)
    return math.floor(d / 2), math.floor(d)


def backoff_delay(opts: QueueOpts, attempts: int) -> int:
    low, high = backoff_bounds(opts, attempts)
    return _rng.randint(low, high)


def _secs(value: float | int | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def as_interval(value: float | int | timedelta) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)
