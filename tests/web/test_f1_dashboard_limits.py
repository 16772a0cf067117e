"""F1, V2: the dashboard's queue page shows a queue's limits and its slots in use; a
queue with limits only is a queue (no 404)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Limits, Rate, Store

from .._web import web_client


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def test_f1_the_queue_page_shows_limits_and_slots_in_use(client: Any, store: Store) -> None:
    store.queue("only-limits").set_limits(Limits(concurrency=1))
    page = client.get("/queues/only-limits")
    assert page.status_code == 200  # limits only: still a queue (V2)
    assert "concurrency 1 (0 in use)" in page.text
    q = store.queue("limited")
    q.set_limits(Limits(concurrency=3, group_concurrency=1, rate=Rate(100, per=60)))
    q.enqueue_many([b"a", b"b"])
    assert len(q.claim_batch("w", 5)) == 2
    page = client.get("/queues/limited")
    limits = page.text.split("data-limits>")[1].split("</p>")[0]
    assert "concurrency 3 (2 in use)" in limits
    assert "per group 1" in limits and "rate 100/60s" in limits
