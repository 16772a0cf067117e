"""Values handed back to callers: frozen, detached from any session."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple, cast

from .limits import Limits

__all__ = [
    "ERROR_HISTORY_LIMIT",
    "JOB_STATUSES",
    "LIVE_COLUMNS",
    "Job",
    "JobError",
    "JobStatus",
    "QueueStats",
    "SweepResult",
    "UNDECODABLE_ERROR",
    "decode_claimed",
    "shown",
    "shown_row",
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
    "grp",
    "workflow_id",
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


def _checked_errors(stored: Any) -> tuple[JobError, ...]:
    """``_errors`` that refuses any entry not of the shape the library writes."""
    errors = _errors(stored)
    for entry in errors:
        if not isinstance(entry.error, str | None) or not isinstance(entry.traceback, str | None):
            raise TypeError("an errors entry's error/traceback is not text")
    return errors


# What a loaded time may be: one Python can show in every session time zone
# (validate.aware_datetime's range; migration 0009 checks it in the table).
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def _check_loaded(job: Job) -> None:
    """Raise if ``job`` holds a value no caller could use (a row nobody validated).

    asyncpg loads ``infinity`` as ``datetime.max``; ``errors`` may hold any
    JSON array a foreign writer put there.  psycopg refuses out-of-range times
    while loading (the constraints of migration 0009 keep them out).
    """
    for name in ("run_at", "created_at", "expires_at", "claim_deadline"):
        value = getattr(job, name)
        if value is None and name in ("expires_at", "claim_deadline"):
            continue
        # Years 2-9998 are in range whatever the zone (an offset is under a
        # day): only the edge years are compared, as comparing times of two
        # zones (the bounds' UTC, psycopg's ZoneInfo) costs a utcoffset() each.
        if not (
            isinstance(value, datetime)
            and value.tzinfo is not None
            and (1 < value.year < 9999 or _EARLIEST <= value <= _LATEST)
        ):
            raise ValueError(f"{name} {value!r} is outside {_EARLIEST.year}-{_LATEST.year}")
    if job.status not in JOB_STATUSES:
        raise ValueError(f"status {job.status!r} is not one of {JOB_STATUSES}")


# last_error of a claimed row the library could not load (decode_claimed).
UNDECODABLE_ERROR = "undecodable row"


def _is_carrier(ctx: object) -> bool:
    return isinstance(ctx, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in ctx.items()
    )


def decode_claimed(rows: Iterable[Sequence[Any]]) -> tuple[list[Job], list[tuple[int, str]]]:
    """The claim's rows as ``Job`` values, one row at a time.

    A row that cannot be made a usable ``Job`` does not fail the batch: it
    comes back as ``(id, why)`` for the caller to dead-letter, and the
    batch's other jobs are handed out.  The id is the row's first column, a
    ``bigint`` every driver loads.
    """
    jobs: list[Job] = []
    bad: list[tuple[int, str]] = []
    for row in rows:
        try:
            job = Job.from_live(row, strict=True)
            _check_loaded(job)
            if job.trace_context is not None and not _is_carrier(job.trace_context):
                # B3: a carrier nobody can read starts a fresh trace; the job runs.
                job = dataclasses.replace(job, trace_context=None)
        except Exception as exc:  # any failure to load is the row's
            bad.append(
                (
                    int(row[0]),
                    f"{UNDECODABLE_ERROR}: {type(exc).__name__}: {exc}".replace("\x00", "")[:500],
                )
            )
        else:
            jobs.append(job)
    return jobs, bad


def shown_row(row: Sequence[Any]) -> Job:
    """A row of the read shape (``get_job``, listings): ``LIVE_COLUMNS``, then
    ``died_at``, ``result``, ``finished_at`` -- live, dead and kept completed rows
    alike (R1) -- shown as ``shown`` shows it."""
    *live, died_at, result, finished_at = row
    return shown(live, died_at, result, finished_at)


def shown(
    row: Sequence[Any],
    died_at: datetime | None = None,
    result: bytes | None = None,
    finished_at: datetime | None = None,
) -> Job:
    """A row to show (listings, ``get_job``): never fails on its JSON columns.

    An ``errors`` history or a trace context that cannot be read is shown
    as none (``last_error``, a column of its own, still is), so a row a
    foreign writer malformed is listed like any other instead of failing
    the whole listing.
    """
    try:
        return Job.from_live(row, died_at, result, finished_at)
    except (KeyError, TypeError, ValueError, AttributeError):
        cleared = list(row)
        cleared[_ERRORS_AT] = None
        cleared[_TRACE_AT] = None
        return Job.from_live(cleared, died_at, result, finished_at)


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
    # F3: the job's group (EnqueueOpts.group), None without one.
    group: str | None = None
    # G1: the workflow this job is a step of, else None.
    workflow_id: int | None = None
    # G1: the ids of the steps a waiting step still waits for (its status is
    # ``pending``); empty for every other job.
    waiting_on: tuple[int, ...] = ()

    @classmethod
    def from_live(
        cls,
        row: Sequence[Any],
        died_at: datetime | None = None,
        result: bytes | None = None,
        finished_at: datetime | None = None,
        *,
        strict: bool = False,
    ) -> Job:
        """A row of ``LIVE_COLUMNS``, in that order (the claim's rows).

        Positional: a third of the cost of reading them by name, paid for
        every claimed job.  ``died_at`` comes from the dead table.
        """
        (id_, queue, payload, status, priority, run_at, attempts, max_attempts, vt,
         expires_at, worker_id, claim_deadline, created_at, last_error, errors,
         trace_context, unique_key, keep, group, workflow_id) = row  # fmt: skip
        return _assemble(
            id_, queue, bytes(payload), status, priority, run_at, attempts, max_attempts,
            _seconds(vt), expires_at, worker_id, claim_deadline, created_at, last_error,
            died_at,
            () if errors is None else (_checked_errors if strict else _errors)(errors),
            trace_context, unique_key, None if result is None else bytes(result),
            finished_at, None if keep is None else _seconds(keep), group, workflow_id, (),
        )  # fmt: skip


def _assembler() -> Callable[..., Job]:
    """``_assemble(*values)``: ``Job(*values)`` (every field, in order), fast.

    The frozen ``__init__`` sets each field through ``object.__setattr__``;
    here each is a plain slot write on an ``_Unfrozen`` (Job's slots, no
    ``__setattr__``), which then becomes a ``Job``: same slots, same layout,
    so Python allows the ``__class__`` change (1.3 us less per claimed job
    than calling each slot's setter)."""
    fields = [f.name for f in dataclasses.fields(Job)]
    unfrozen = type("_Unfrozen", (), {"__slots__": Job.__slots__})
    head = f"def _assemble({', '.join(fields)}):\n    job = _new(_Unfrozen)\n"
    body = "".join(f"    job.{name} = {name}\n" for name in fields)
    scope: dict[str, Any] = {"_new": object.__new__, "_Unfrozen": unfrozen, "Job": Job}
    exec(head + body + "    job.__class__ = Job\n    return job\n", scope)
    return cast("Callable[..., Job]", scope["_assemble"])


_assemble = _assembler()


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


_ERRORS_AT = LIVE_COLUMNS.index("errors")
_TRACE_AT = LIVE_COLUMNS.index("trace_context")


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
    # F1: the queue's limits, None when it has none.
    limits: Limits | None = None

    @property
    def slots_in_use(self) -> int:
        """F2: live claims -- processing rows whose claim has not lapsed."""
        return self.processing - self.lapsed
