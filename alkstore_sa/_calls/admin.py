"""The operator's calls on a queue and a store (O1-O6): list, requeue, purge, pause, stats.

Not on a worker's path: each validates its arguments before any SQL, and
what one call reads or moves is bounded (``MAX_LIST``, ``MAX_REQUEUE``).
"""

from __future__ import annotations

from functools import partial

from .._db import admin as _ops
from .._db import flow as _flow
from .._db.address import QueueAddress, StoreAddress
from .._values import validate as v
from .._values.job import JOB_STATUSES, Job, JobStatus, QueueStats
from .._values.limits import Limits
from .._values.stamps import as_interval
from .._values.validate import MAX_LIST, MAX_REQUEUE
from . import Call

__all__ = ["QueueAdminCalls", "queue_names", "store_stats"]


class QueueAdminCalls:
    """What ``QueueCore`` offers an operator; it needs only the queue's address."""

    __slots__ = ()
    address: QueueAddress

    def jobs(self, status: object, limit: object, before: object) -> Call[list[Job]]:
        """O1: validated status, limit (1..1000) and keyset start."""
        return partial(
            _ops.list_jobs,
            address=self.address,
            status=_status(status),
            limit=_bounded(limit, "limit", MAX_LIST),
            before=None if before is None else v.job_id(before),
        )

    def requeue_dead(self, job_ids: object, limit: object) -> Call[int] | None:
        """O2; ``None`` for an empty ``job_ids``: the face returns 0 without SQL."""
        size = _bounded(limit, "limit", MAX_REQUEUE)
        ids = None if job_ids is None else v.job_ids(job_ids)
        if ids is not None and not ids:
            return None
        return partial(_ops.requeue_dead, address=self.address, job_ids=ids, limit=size)

    def purge_dead(self, job_ids: object, older_than: object) -> Call[int] | None:
        """O3; ``None`` for an empty ``job_ids``: the face returns 0 without SQL."""
        age = None if older_than is None else v.duration(older_than, "older_than", allow_zero=True)
        ids = None if job_ids is None else v.job_ids(job_ids)
        if ids is not None and not ids:
            return None
        return partial(
            _ops.purge_dead,
            address=self.address,
            job_ids=ids,
            older_than=None if age is None else as_interval(age),
        )

    def pause(self) -> Call[bool]:
        return partial(_ops.pause, address=self.address)

    def resume(self) -> Call[bool]:
        return partial(_ops.resume, address=self.address)

    def set_limits(self, limits: object) -> Call[None]:
        """F1: replace every limit of the queue (None or an empty ``Limits`` removes them)."""
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits must be Limits or None, got {type(limits).__name__}")
        return partial(_flow.set_limits, address=self.address, limits=limits)

    def limits(self) -> Call[Limits | None]:
        return partial(_flow.limits, address=self.address)

    def stats(self) -> Call[QueueStats]:
        return partial(_ops.stats, address=self.address)


# O1 and O2 bound what one call reads or moves (MAX_LIST, MAX_REQUEUE: _values.validate).


def _bounded(value: object, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if not 1 <= value <= high:
        raise ValueError(f"{what} must be between 1 and {high}, got {value}")
    return value


def _status(value: object) -> JobStatus | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"status must be a str or None, got {type(value).__name__}")
    for known in JOB_STATUSES:
        if value == known:
            return known
    raise ValueError(f"status must be one of {', '.join(JOB_STATUSES)} or None, got {value!r}")


def queue_names(schema: str) -> Call[list[str]]:
    """O6: every queue with a live row, a dead row or a pause."""
    return partial(_ops.queue_names, address=StoreAddress(schema))


def store_stats(schema: str, *, recent: bool = False) -> Call[dict[str, QueueStats]]:
    """O6: every such queue's stats, in one snapshot (``recent``: V2's listing too)."""
    return partial(_ops.store_stats, address=StoreAddress(schema), recent=recent)
