"""Values handed back to callers: frozen, detached from any session."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

__all__ = [
    "ERROR_HISTORY_LIMIT",
    "JOB_STATUSES",
    "LIVE_COLUMNS",
    "Job",
    "JobError",
    "JobStatus",
    "QueueStats",
    "SweepResult",
]

JobStatus = Literal["pending", "processing", "dead", "completed"]
JOB_STATUSES: tuple[JobStatus, ...] = ("pending", "processing", "dead", "completed")

# The live table's columns in table order: what ``RETURNING jobs.*`` yields.
LIVE_COLUMNS = (
    "id",
    "queue",
    "payload",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "visibility_timeout",
    "expires_at",
    "worker_id",
    "claim_deadline",
    "created_at",
    "last_error",
    "errors",
    "trace_context",
    "unique_key",
    "keep_completed",
)

# B2: how many of a job's errors it keeps (the newest).
ERROR_HISTORY_LIMIT = 10


@dataclass(frozen=True, slots=True)
class JobError:
    """One entry of a job's error history (B2).

    ``attempt``: the attempt that ended with it.  ``at``: when it was
    recorded.  ``error``: the text stored as ``last_error`` then (None when a
    retry gave none and the job had none before).  ``traceback``: the
    handler's, when a Worker ran it and it raised; else None.
    """

    attempt: int
    at: datetime
    error: str | None
    traceback: str | None


def _errors(stored: Any) -> tuple[JobError, ...]:
    """The ``errors`` column (a JSON array, parsed or not) as ``JobError`` values."""
    if stored is None:
        return ()
    if isinstance(stored, str | bytes):
        stored = json.loads(stored)
    return tuple(
        JobError(
            int(entry["attempt"]),
            datetime.fromisoformat(entry["at"]),
            entry.get("error"),
            entry.get("traceback"),
        )
        for entry in stored
    )


@dataclass(frozen=True, slots=True)
class Job:
    """One job row as it was read (live or dead)."""

    id: int
    queue: str
    payload: bytes
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    visibility_timeout: float
    expires_at: datetime | None
    worker_id: str | None
    claim_deadline: datetime | None
    created_at: datetime
    last_error: str | None
    died_at: datetime | None
    errors: tuple[JobError, ...] = ()
    # B3: the enqueuer's trace context (a W3C propagation carrier), None when untraced.
    trace_context: dict[str, str] | None = field(default=None, repr=False)
    # U1: the key the job was enqueued with (kept by a dead letter), None without one.
    unique_key: str | None = None
    # R1: what the job produced (a kept completed job only), else None.
    result: bytes | None = field(default=None, repr=False)
    # R1: when it was acked (a kept completed job only), else None.
    finished_at: datetime | None = None
    # R1: the stamp: seconds it is kept once acked; None = deleted at its ack.
    keep_completed: float | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Job:
        """A row of the read shape: ``LIVE_COLUMNS``, then ``died_at``, ``result``,
        ``finished_at`` (live, dead and kept completed rows alike)."""
        *live, died_at, result, finished_at = row
        return cls.from_live(live, died_at, result, finished_at)

    @classmethod
    def from_live(
        cls,
        row: Sequence[Any],
        died_at: datetime | None = None,
        result: bytes | None = None,
        finished_at: datetime | None = None,
    ) -> Job:
        """A row of ``LIVE_COLUMNS``, in that order (the claim's rows).

        Positional: a third of the cost of reading them by name, paid for
        every claimed job.  ``died_at`` comes from the dead table.
        """
        (
            id_,
            queue,
            payload,
            status,
            priority,
            run_at,
            attempts,
            max_attempts,
            vt,
            expires_at,
            worker_id,
            claim_deadline,
            created_at,
            last_error,
            errors,
            trace_context,
            unique_key,
            keep,
        ) = row
        return cls(
            id_,
            queue,
            bytes(payload),
            status,
            priority,
            run_at,
            attempts,
            max_attempts,
            _seconds(vt),
            expires_at,
            worker_id,
            claim_deadline,
            created_at,
            last_error,
            died_at,
            () if errors is None else _errors(errors),
            trace_context,
            unique_key,
            None if result is None else bytes(result),
            finished_at,
            None if keep is None else _seconds(keep),
        )


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class SweepResult(NamedTuple):
    """What ``sweep_expired()`` did: rows moved to dead as expired, dead rows purged.

    ``completed``: kept completed jobs deleted once their time was up (R1).
    """

    expired: int
    purged: int
    completed: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's counts, read in one snapshot (O5).

    ``due``: pending, due, not expired.  ``scheduled``: pending with a future
    ``run_at``, not expired.  ``processing``: every processing row, of which
    ``lapsed`` are past their claim deadline.  ``expired``: live rows past
    ``expires_at`` awaiting a sweep (a processing one counts in both).
    ``dead``: dead letters.  ``oldest_due_age``: seconds since the oldest due
    row's ``run_at`` (0.0 when none is due).  ``paused``: a pause is in force.
    """

    queue: str
    due: int
    scheduled: int
    processing: int
    lapsed: int
    expired: int
    dead: int
    oldest_due_age: float
    paused: bool
    # R1: kept completed jobs not swept yet.
    completed: int = 0
