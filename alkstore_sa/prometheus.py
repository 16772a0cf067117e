"""Prometheus metrics (B4); needs the extra: ``pip install alkstore-sa[prometheus]``.

Two sources, served together or apart:

- ``StoreCollector(store)``: queue gauges read from ``store.stats()`` (O6)
  when Prometheus scrapes, at most one stats query per ``cache_seconds``
  however many scrapes come in that time.
- ``instrument()``: counters and histograms of the workers running in this
  process (an ``Observer`` on the worker's hot path, ``_instrument``).

``metrics_app(store)`` is an ASGI app serving a registry plus a store's
gauges at the path it is mounted on; ``alkstore metrics --port N`` and
``alkstore worker --metrics-port N`` serve them over plain HTTP.  Every
metric, its labels and an example line are in docs/observability.md.

The core package never imports this module (nor ``prometheus_client``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, make_asgi_app
    from prometheus_client.metrics_core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "alkstore_sa.prometheus needs prometheus_client: pip install 'alkstore-sa[prometheus]'"
    ) from exc

from ._extras import instrument as _instrument
from ._extras.instrument import Observer, Outcome, queue_time
from ._values.job import Job, QueueStats
from ._values.workers import WorkerInfo
from .aio import AsyncStore
from .store import Store

__all__ = [
    "DEFAULT_CACHE_SECONDS",
    "DURATION_BUCKETS",
    "QUEUE_TIME_BUCKETS",
    "StoreCollector",
    "WorkerMetrics",
    "instrument",
    "metrics_app",
    "uninstrument",
]

log = logging.getLogger("alkstore_sa.prometheus")

# How long one store.stats() result serves scrapes (seconds).
DEFAULT_CACHE_SECONDS = 5.0

# Handler runs: milliseconds to minutes.  Queue time: a backlog can wait an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
QUEUE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip

# The disjoint states of ``alkstore_queue_jobs`` (lapsed and expired overlap
# them, so they are gauges of their own: a sum over ``state`` stays meaningful).
_STATES = ("due", "scheduled", "processing", "dead")


# --- queue gauges -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One ``store.stats()`` read: its figures (None: it failed) and what it took."""

    stats: Mapping[str, QueueStats] | None
    took: float
    at: float  # monotonic time it ended
    # V1: the registry of workers, read right after the stats (None: that read failed).
    workers: Sequence[WorkerInfo] | None = None


# An ASGI scrape reads the stats off the event loop first, then hands them to
# collect() (which prometheus_client calls on the loop) through this.
_pinned: contextvars.ContextVar[tuple[StoreCollector, _Snapshot] | None] = contextvars.ContextVar(
    "alkstore_prometheus_pinned", default=None
)


def _cache_seconds(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"cache_seconds must be a number of seconds, got {value!r}")
    if not 0 <= value <= 86400:  # refuses nan and inf too
        raise ValueError(f"cache_seconds must be between 0 and 86400, got {value!r}")
    return float(value)


class StoreCollector:
    """Queue gauges from ``store.stats()``, for a ``prometheus_client`` registry.

    ``REGISTRY.register(StoreCollector(store))`` (registering runs no query:
    ``describe()`` names the metrics without reading them).  Each scrape
    reuses the last figures while they are younger than ``cache_seconds``;
    concurrent scrapes share one query.  A failed query is logged and
    yields ``alkstore_up 0`` with no queue gauges (its failure is cached
    like a result, so a database that is down is asked once per window);
    ``collect()`` never raises.

    ``store`` is a sync ``Store``: ``collect()`` is synchronous and runs on
    the scraping thread.  An ``AsyncStore`` application either gives a
    ``Store`` on the same database, or uses ``metrics_app(async_store)``,
    which awaits ``stats()`` on the app's own event loop.
    """

    def __init__(
        self,
        store: Store,
        *,
        cache_seconds: float = DEFAULT_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(store, Store) and not isinstance(self, _AsyncStoreCollector):
            raise TypeError(
                f"StoreCollector needs a sync Store, got {type(store).__name__}; for an "
                "AsyncStore use metrics_app(async_store), or a Store on the same database"
            )
        self.store = store
        self.cache_seconds = _cache_seconds(cache_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._last: _Snapshot | None = None

    # -- reading -------------------------------------------------------------------------

    def _fresh(self) -> _Snapshot | None:
        last = self._last
        if last is not None and self._clock() - last.at < self.cache_seconds:
            return last
        return None

    def _failed(self, started: float) -> _Snapshot:
        log.warning("alkstore stats query failed; serving alkstore_up 0", exc_info=True)
        now = self._clock()
        return _Snapshot(None, now - started, now)

    def snapshot(self) -> _Snapshot:
        """The figures a scrape serves now: cached, or read (once) if stale."""
        with self._lock:
            snap = self._fresh()
            if snap is None:
                started = self._clock()
                try:
                    stats = self.store.stats()
                except Exception:
                    snap = self._failed(started)
                else:
                    now = self._clock()
                    snap = _Snapshot(stats, now - started, now, _workers(self.store.workers))
                self._last = snap
            return snap

    # -- the Collector protocol ----------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """The metric names, without a query (what ``register()`` checks for clashes)."""
        return _families(_Snapshot({}, 0.0, 0.0))

    def collect(self) -> Iterable[Metric]:
        pinned = _pinned.get()
        snap = pinned[1] if pinned is not None and pinned[0] is self else self.snapshot()
        return _families(snap)


class _AsyncStoreCollector(StoreCollector):
    """``metrics_app``'s collector over an ``AsyncStore``: read by ``await refresh()``.

    Outside a scrape of the app (a bare ``collect()`` on another thread) it
    serves the cached figures while fresh, else ``alkstore_up 0``: an async
    engine's connections belong to its event loop.
    """

    def __init__(self, store: AsyncStore, *, cache_seconds: float) -> None:
        super().__init__(store, cache_seconds=cache_seconds)  # type: ignore[arg-type]
        self.astore = store
        self._alock: asyncio.Lock | None = None

    async def refresh(self) -> _Snapshot:
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:
            with self._lock:
                snap = self._fresh()
            if snap is not None:
                return snap
            started = self._clock()
            try:
                stats = await self.astore.stats()
            except Exception:
                snap = self._failed(started)
            else:
                now = self._clock()
                try:
                    workers: list[WorkerInfo] | None = await self.astore.workers()
                except Exception:
                    log.warning("alkstore workers query failed", exc_info=True)
                    workers = None
                snap = _Snapshot(stats, now - started, now, workers)
            with self._lock:
                self._last = snap
            return snap

    def snapshot(self) -> _Snapshot:
        with self._lock:
            snap = self._fresh()
        if snap is None:
            log.warning("an AsyncStore's gauges are read by metrics_app's scrapes only")
            snap = _Snapshot(None, 0.0, self._clock())
        return snap


def _workers(read: Callable[[], list[WorkerInfo]]) -> list[WorkerInfo] | None:
    # A database migrated before the registry (V1) still serves its queue gauges.
    try:
        return read()
    except Exception:
        log.warning("alkstore workers query failed", exc_info=True)
        return None


def _families(snap: _Snapshot) -> list[Metric]:
    up = GaugeMetricFamily(
        "alkstore_up",
        "1 if the last alkstore stats query succeeded, else 0",
        value=0.0 if snap.stats is None else 1.0,
    )
    took = GaugeMetricFamily(
        "alkstore_stats_duration_seconds", "How long the last alkstore stats query took"
    )
    took.add_metric([], snap.took)
    jobs = GaugeMetricFamily(
        "alkstore_queue_jobs",
        "Jobs by state: due (claimable now), scheduled (future run_at), processing, dead",
        labels=["queue", "state"],
    )
    lapsed = GaugeMetricFamily(
        "alkstore_queue_lapsed_jobs",
        "Processing jobs past their claim deadline (counted in processing too)",
        labels=["queue"],
    )
    expired = GaugeMetricFamily(
        "alkstore_queue_expired_jobs",
        "Live jobs past expires_at awaiting a sweep (a processing one counts in processing too)",
        labels=["queue"],
    )
    oldest = GaugeMetricFamily(
        "alkstore_queue_oldest_due_age_seconds",
        "Seconds since the oldest due job's run_at (0 when none is due)",
        labels=["queue"],
    )
    paused = GaugeMetricFamily(
        "alkstore_queue_paused", "1 while a pause is in force, else 0", labels=["queue"]
    )
    if snap.stats is not None:
        for name, s in snap.stats.items():
            counts = (s.due, s.scheduled, s.processing, s.dead)
            for state, count in zip(_STATES, counts, strict=True):
                jobs.add_metric([name, state], count)
            lapsed.add_metric([name], s.lapsed)
            expired.add_metric([name], s.expired)
            oldest.add_metric([name], s.oldest_due_age)
            paused.add_metric([name], 1.0 if s.paused else 0.0)
    workers = GaugeMetricFamily(
        "alkstore_workers",
        "Registered workers (V1): alive (seen within 60 s) or gone (not seen since, not "
        "pruned yet)",
        labels=["state"],
    )
    if snap.workers is not None:
        alive = sum(1 for w in snap.workers if w.alive)
        workers.add_metric(["alive"], alive)
        workers.add_metric(["gone"], len(snap.workers) - alive)
    return [up, took, jobs, lapsed, expired, oldest, paused, workers]


# --- worker metrics -------------------------------------------------------------------------


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


# --- serving --------------------------------------------------------------------------------


class _Forward:
    """Another registry's metrics, as one collector (no names: never a clash check)."""

    def __init__(self, registry: Collector) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


def _served_registry(
    registry: Collector | None = REGISTRY, collector: StoreCollector | None = None
) -> CollectorRegistry:
    """A registry serving ``registry``'s metrics and ``collector``'s gauges, neither
    registered in the other (so serving twice, or from two apps, clashes with nothing)."""
    served = CollectorRegistry(auto_describe=False)
    if registry is not None:
        served.register(_Forward(registry))
    if collector is not None:
        served.register(collector)
    return served


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def metrics_app(
    store: Store | AsyncStore | None = None,
    registry: Collector | None = REGISTRY,
    *,
    cache_seconds: float = DEFAULT_CACHE_SECONDS,
) -> ASGIApp:
    """An ASGI app answering every GET with the Prometheus exposition of
    ``registry`` (the default: ``prometheus_client``'s, where ``instrument()``
    counts) and, when ``store`` is given, its queue gauges.

    Mount it where Prometheus will scrape (Starlette: ``Mount("/metrics",
    app=metrics_app(store))``) or serve it on its own.  The stats query runs
    off the event loop (a ``Store``: in a thread; an ``AsyncStore``: awaited),
    never blocking the host application's other requests.  ``registry=None``
    serves the store's gauges alone.
    """
    collector: StoreCollector | None
    if store is None:
        collector = None
    elif isinstance(store, AsyncStore):
        collector = _AsyncStoreCollector(store, cache_seconds=cache_seconds)
    else:
        collector = StoreCollector(store, cache_seconds=cache_seconds)
    inner = make_asgi_app(_served_registry(registry, collector))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # served on its own: nothing to start or stop
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if collector is None:
            await inner(scope, receive, send)
            return
        if isinstance(collector, _AsyncStoreCollector):
            snap = await collector.refresh()
        else:
            snap = await asyncio.to_thread(collector.snapshot)
        token = _pinned.set((collector, snap))
        try:
            await inner(scope, receive, send)
        finally:
            _pinned.reset(token)

    return app
