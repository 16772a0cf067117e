"""Queue stamps and per-job options: validated on construction (Q3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from . import validate as v
from .limits import group_name

# U2: what a keyed enqueue does when its key's job is live.
ON_CONFLICT = ("keep", "replace")

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "EnqueueOpts", "QueueOpts"]

MAX_RETRY_CAP = 3600.0
# The default cap on one payload (V7): 10 MiB.  Payloads are read whole -- a
# worker holds up to twice `concurrency` of them, `jobs`/the dashboard read
# pages of them -- so an unbounded default let one 200 MiB argument cost a
# listing 1.3 GB of memory.  Bigger data belongs in object storage, with its
# key in the payload; `max_payload_bytes=None` lifts the cap.
DEFAULT_MAX_PAYLOAD_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class QueueOpts:
    """The stamps a queue handle puts on the jobs it enqueues.

    Durations are seconds (int/float, sub-second allowed) or ``timedelta``;
    they are stored normalised to float seconds.
    """

    priority: int = 0
    max_attempts: int = 5
    visibility_timeout: float | int | timedelta = 30
    expires_in: float | int | timedelta | None = None
    retry_base: float | int | timedelta = 1
    retry_cap: float | int | timedelta = MAX_RETRY_CAP
    dead_letter_retention: float | int | timedelta | None = None
    # The largest payload this handle enqueues, in bytes (None: no limit; V7).
    max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES
    # R1: keep each acked job (and its result) this long; None deletes it at its ack.
    keep_completed: float | int | timedelta | None = None

    def __post_init__(self) -> None:
        v.integer(self.priority, "priority")
        _set(self, "keep_completed", v.optional_duration(self.keep_completed, "keep_completed"))
        if self.max_payload_bytes is not None:
            v.integer(self.max_payload_bytes, "max_payload_bytes", minimum=1)
        v.integer(self.max_attempts, "max_attempts", minimum=1)
        _set(self, "visibility_timeout", v.duration(self.visibility_timeout, "visibility_timeout"))
        _set(self, "expires_in", v.optional_duration(self.expires_in, "expires_in"))
        _set(self, "retry_base", v.duration(self.retry_base, "retry_base"))
        cap = v.duration(self.retry_cap, "retry_cap")
        if cap > MAX_RETRY_CAP:
            raise ValueError(f"retry_cap must be at most {MAX_RETRY_CAP:g} seconds, got {cap:g}")
        _set(self, "retry_cap", cap)
        retention = self.dead_letter_retention
        if retention is not None:
            retention = v.duration(retention, "dead_letter_retention", allow_zero=True)
        _set(self, "dead_letter_retention", retention)


@dataclass(frozen=True, slots=True)
class EnqueueOpts:
    """Per-job options; each one left ``None`` falls back to the queue's stamp.

    ``delay`` wins over ``run_at`` (both relative to the enqueue's one clock
    read); ``priority``, ``expires_in`` and ``max_attempts`` override the
    queue's stamps; ``visibility_timeout`` and the retry curve are the queue's
    alone (Q4).
    """

    priority: int | None = None
    delay: float | int | timedelta | None = None
    run_at: datetime | None = None
    expires_in: float | int | timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    # R1: overrides the queue's keep_completed stamp for this job.
    keep_completed: float | int | timedelta | None = None
    # F3: the job's group (group_concurrency and group_rate count per group).
    group: str | None = None
    # U2: "keep" (U1: the live job stays as it is) or "replace" (a pending
    # live job takes this enqueue's payload, priority, run_at and group).
    on_conflict: str = "keep"

    def __post_init__(self) -> None:
        _set(self, "keep_completed", v.optional_duration(self.keep_completed, "keep_completed"))
        if self.group is not None:
            group_name(self.group)
        if not isinstance(self.on_conflict, str):
            raise TypeError(f"on_conflict must be a str, got {type(self.on_conflict).__name__}")
        if self.on_conflict not in ON_CONFLICT:
            raise ValueError(f"on_conflict must be one of {ON_CONFLICT}, got {self.on_conflict!r}")
        if self.priority is not None:
            v.integer(self.priority, "priority")
        if self.delay is not None:
            _set(self, "delay", v.duration(self.delay, "delay", allow_zero=True))
        if self.run_at is not None:
            v.aware_datetime(self.run_at, "run_at")
        _set(self, "expires_in", v.optional_duration(self.expires_in, "expires_in"))
        if self.max_attempts is not None:
            v.integer(self.max_attempts, "max_attempts", minimum=1)
        if self.unique_key is not None:
            v.unique_key(self.unique_key)


def _set(obj: object, field: str, value: object) -> None:
    # Frozen dataclasses normalise their own fields through object.__setattr__.
    object.__setattr__(obj, field, value)
