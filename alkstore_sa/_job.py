"""Values handed back to callers: frozen, detached from any session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

__all__ = ["LIVE_COLUMNS", "Job", "JobStatus", "SweepResult"]

JobStatus = Literal["pending", "processing", "dead"]

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

    @classmethod
    def from_row(cls, row: Mapping[Any, Any], status: JobStatus | None = None) -> Job:
        vt = row["visibility_timeout"]
        return cls(
            id=row["id"],
            queue=row["queue"],
            payload=bytes(row["payload"]),
            status=status or row["status"],
            priority=row["priority"],
            run_at=row["run_at"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            visibility_timeout=vt.total_seconds() if isinstance(vt, timedelta) else float(vt),
            expires_at=row["expires_at"],
            worker_id=row["worker_id"],
            claim_deadline=row["claim_deadline"],
            created_at=row["created_at"],
            last_error=row["last_error"],
            # Not .get(): a missing key makes SQLAlchemy's RowMapping build and
            # swallow an exception, a cost on every claimed row.
            died_at=row["died_at"] if "died_at" in row else None,  # noqa: SIM401
        )

    @classmethod
    def from_live(cls, row: Sequence[Any]) -> Job:
        """A row of ``LIVE_COLUMNS``, in that order (the claim's rows).

        Positional: a third of ``from_row``'s cost over a ``RowMapping``,
        paid for every claimed job.
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
            vt.total_seconds() if isinstance(vt, timedelta) else float(vt),
            expires_at,
            worker_id,
            claim_deadline,
            created_at,
            last_error,
            None,
        )


class SweepResult(NamedTuple):
    """What ``sweep_expired()`` did: rows moved to dead as expired, dead rows purged."""

    expired: int
    purged: int
