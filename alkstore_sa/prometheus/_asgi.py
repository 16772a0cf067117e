"""An ASGI app serving a registry plus a store's gauges at the path it is mounted on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, make_asgi_app
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..aio import AsyncStore
from ..store import Store
from ._gauges import DEFAULT_CACHE_SECONDS, PINNED, AsyncStoreCollector, StoreCollector


class _Forward:
    """Another registry's metrics, as one collector (no names: never a clash check)."""

    def __init__(self, registry: Collector) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


def served_registry(
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
        collector = AsyncStoreCollector(store, cache_seconds=cache_seconds)
    else:
        collector = StoreCollector(store, cache_seconds=cache_seconds)
    inner = make_asgi_app(served_registry(registry, collector))

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
        if isinstance(collector, AsyncStoreCollector):
            snap = await collector.refresh()
        else:
            snap = await asyncio.to_thread(collector.snapshot)
        token = PINNED.set((collector, snap))
        try:
            await inner(scope, receive, send)
        finally:
            PINNED.reset(token)

    return app
