"""Queue gauges read from the store when Prometheus scrapes, at most once per cache window."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from .._values.job import QueueStats
from .._values.workers import WorkerInfo
from ..aio import AsyncStore
from ..store import Store

log = logging.getLogger("alkstore_sa.prometheus")

# How long one store.stats() result serves scrapes (seconds).
DEFAULT_CACHE_SECONDS = 5.0

# The disjoint states of ``alkstore_queue_jobs`` (lapsed and expired overlap
# them, so they are gauges of their own: a sum over ``state`` stays meaningful).
_STATES = ("due", "scheduled", "processing", "dead")


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
PINNED: contextvars.ContextVar[tuple[StoreCollector, _Snapshot] | None] = contextvars.ContextVar(
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
        if not isinstance(store, Store) and not isinstance(self, AsyncStoreCollector):
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
        pinned = PINNED.get()
        snap = pinned[1] if pinned is not None and pinned[0] is self else self.snapshot()
        return _families(snap)


class AsyncStoreCollector(StoreCollector):
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
    limit = GaugeMetricFamily(
        "alkstore_queue_limit",
        "A queue's concurrency limits (F1): concurrency, group_concurrency",
        labels=["queue", "limit"],
    )
    slots = GaugeMetricFamily(
        "alkstore_queue_slots_in_use",
        "Live claims of a queue with limits: processing jobs whose claim has not lapsed (F2)",
        labels=["queue"],
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
            if s.limits is not None:  # F1: limited queues only
                slots.add_metric([name], s.slots_in_use)
                for kind in ("concurrency", "group_concurrency"):
                    if (value := getattr(s.limits, kind)) is not None:
                        limit.add_metric([name, kind], value)
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
    return [up, took, jobs, lapsed, expired, oldest, paused, limit, slots, workers]
