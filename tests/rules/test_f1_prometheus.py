"""F1, B4: the queue gauges include a limited queue's limits and its slots in use."""

from __future__ import annotations

import asyncio

from alkstore_sa import Limits, Store
from alkstore_sa import prometheus as prom

from .test_b4_prometheus import _asgi_get, _get, _samples


def test_f1_prometheus_gauges_show_limits_and_slots_in_use(store: Store) -> None:
    q = store.queue("gauged")
    q.set_limits(Limits(concurrency=4, group_concurrency=2))
    q.enqueue_many([b"a", b"b", b"c"])
    assert len(q.claim_batch("w", 3)) == 3
    store.queue("plain").enqueue(b"x")
    status, _, body = asyncio.run(_asgi_get(prom.metrics_app(store, registry=None), "/metrics"))
    assert status == 200
    samples = _samples(body.decode())
    assert _get(samples, "alkstore_queue_limit", queue="gauged", limit="concurrency") == 4
    assert _get(samples, "alkstore_queue_limit", queue="gauged", limit="group_concurrency") == 2
    assert _get(samples, "alkstore_queue_slots_in_use", queue="gauged") == 3
    assert _get(samples, "alkstore_queue_slots_in_use", queue="plain") is None  # no limits
