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

try:
    import prometheus_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "alkstore_sa.prometheus needs prometheus_client: pip install 'alkstore-sa[prometheus]'"
    ) from exc

from ._asgi import metrics_app
from ._gauges import DEFAULT_CACHE_SECONDS, StoreCollector
from ._worker_metrics import (
    DURATION_BUCKETS,
    QUEUE_TIME_BUCKETS,
    WorkerMetrics,
    instrument,
    uninstrument,
)

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
