"""Counters and histograms of the workers running in this process (an ``Observer``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

from .._extras import instrument as _instrument
from .._extras.instrument import Observer, Outcome, queue_time
from .._values.job import Job

# Handler runs: milliseconds to minutes.  Queue time: a backlog can wait an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
QUEUE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip


class _QueueMetrics:
    """One queue's label children, resolved once (``labels()`` costs more than ``inc()``)."""

    __slots__ = ("claimed", "duration", "outcomes", "queue_time")

    def __init__(self, m: WorkerMetrics, queue: str) -> None:
        self.claimed = m.claimed_jobs.labels(queue)
        self.duration = m.duration.labels(queue)
        self.queue_time = m.queue_time.labels(queue)
        self.outcomes = {
            outcome: m.jobs.labels(queue, outcome)
            for outcome in ("acked", "retried", "dead", "lost", "snoozed", "cancelled")
        }


class WorkerMetrics(Observer):
    """The worker counters and histograms of one registry, fed by every worker run.

    Made and installed by ``instrument()``; a run reads the installed
    observers when it starts, so instrument before ``run()``.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        queue_time_buckets: Sequence[float] = QUEUE_TIME_BUCKETS,
    ) -> None:
        self.registry = registry
        self.jobs = Counter(
            "alkstore_worker_jobs",
            "Handler runs by outcome: acked, retried, dead (dead-lettered), lost (claim lost), "
            "snoozed, cancelled",
            ["queue", "outcome"],
            registry=None,
        )
        self.claimed_jobs = Counter(
            "alkstore_worker_claimed", "Jobs claimed by this process", ["queue"], registry=None
        )
        self.duration = Histogram(
            "alkstore_worker_job_duration_seconds",
            "Handler run time (a run past job_timeout counts as job_timeout)",
            ["queue"],
            buckets=tuple(duration_buckets),
            registry=None,
        )
        self.queue_time = Histogram(
            "alkstore_worker_job_queue_time_seconds",
            "From a job's run_at to its claim (claim_deadline - visibility_timeout)",
            ["queue"],
            buckets=tuple(queue_time_buckets),
            registry=None,
        )
        self._queues: dict[str, _QueueMetrics] = {}

    @property
    def collectors(self) -> tuple[Collector, ...]:
        return (self.jobs, self.claimed_jobs, self.duration, self.queue_time)

    def _of(self, queue: str) -> _QueueMetrics:
        found = self._queues.get(queue)
        if found is None:
            found = self._queues.setdefault(queue, _QueueMetrics(self, queue))
        return found

    def claimed(self, queue: str, jobs: Sequence[Job]) -> None:
        m = self._of(queue)
        m.claimed.inc(len(jobs))
        observe = m.queue_time.observe
        for job in jobs:
            waited = queue_time(job)
            if waited is not None:
                observe(waited)

    def finished(self, queue: str, job: Job, outcome: Outcome, duration: float | None) -> None:
        m = self._of(queue)
        m.outcomes[outcome].inc()
        if duration is not None:
            m.duration.observe(duration)


_lock = threading.Lock()
_by_registry: dict[CollectorRegistry, WorkerMetrics] = {}


def instrument(
    registry: CollectorRegistry = REGISTRY,
    *,
    duration_buckets: Sequence[float] = DURATION_BUCKETS,
    queue_time_buckets: Sequence[float] = QUEUE_TIME_BUCKETS,
) -> WorkerMetrics:
    """Count every worker run of this process into ``registry``; returns its metrics.

    Idempotent per registry: a second call returns the first's metrics (and
    its buckets).  Worker runs started after this call report to it.
    """
    with _lock:
        found = _by_registry.get(registry)
        if found is not None:
            return found
        metrics = WorkerMetrics(
            registry, duration_buckets=duration_buckets, queue_time_buckets=queue_time_buckets
        )
        registered: list[Collector] = []
        try:
            for collector in metrics.collectors:
                registry.register(collector)
                registered.append(collector)
        except BaseException:
            for collector in registered:
                registry.unregister(collector)
            raise
        _by_registry[registry] = metrics
        _instrument.install(metrics)
        return metrics


def uninstrument(registry: CollectorRegistry | None = None) -> None:
    """Undo ``instrument(registry)`` (None: every registry): its metrics leave the
    registry; runs already under way keep reporting to them until they end."""
    with _lock:
        chosen = list(_by_registry) if registry is None else [registry]
        for reg in chosen:
            metrics = _by_registry.pop(reg, None)
            if metrics is None:
                continue
            _instrument.uninstall(metrics)
            for collector in metrics.collectors:
                reg.unregister(collector)
