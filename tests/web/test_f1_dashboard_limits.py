"""F1, V2: the dashboard's queue page shows a queue's limits and its slots in use; a
queue with limits only is a queue (no 404)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Limits, Rate, Store

from .._web import post, web_client

LIVE = {"X-Alkstore-Live": "1"}  # the page's own fetch: the message, not a redirect


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


def test_f1_limits_are_changed_from_the_queue_page(client: Any, store: Store) -> None:
    q = store.queue("set-here")
    q.enqueue(b"x")
    page = client.get("/queues/set-here")
    assert 'data-action="limits"' in page.text
    fields = {"concurrency": "3", "rate_count": "100", "rate_per": "60", "next": "/queues/set-here"}
    r = post(client, "/queues/set-here/limits", fields)
    assert r.status_code == 303 and "done=limits%20of%20set-here%20set" in r.headers["location"]
    assert q.limits() == Limits(concurrency=3, rate=Rate(100, per=60))
    page = client.get("/queues/set-here")
    assert 'name="concurrency" inputmode="numeric" size="6" value="3"' in page.text  # prefilled
    assert 'name="rate_per" inputmode="decimal" size="6" value="60"' in page.text
    r = post(client, "/queues/set-here/limits", {"group_concurrency": "1"}, headers=LIVE)
    assert r.status_code == 200 and r.text == "limits of set-here set"
    assert q.limits() == Limits(group_concurrency=1)  # the form replaces every limit
    r = post(client, "/queues/set-here/limits", {"concurrency": " "}, headers=LIVE)
    assert r.text == "limits of set-here removed" and q.limits() is None


@pytest.mark.parametrize(
    "fields",
    [
        {"concurrency": "0"},
        {"concurrency": "many"},
        {"concurrency": "99999999999"},
        {"group_concurrency": "-1"},
        {"rate_count": "10"},  # no seconds
        {"rate_per": "60"},  # no count
        {"rate_count": "10", "rate_per": "0"},
        {"rate_count": "10", "rate_per": "nan"},
        {"group_rate_count": "10", "group_rate_per": "soon"},
    ],
)
def test_f1_bad_limits_from_the_page_are_a_400_and_change_nothing(
    client: Any, store: Store, fields: dict[str, str]
) -> None:
    q = store.queue("set-bad")
    q.set_limits(Limits(concurrency=2))
    r = post(client, "/queues/set-bad/limits", {"concurrency": "5", **fields}, headers=LIVE)
    assert r.status_code == 400 and "\n" not in r.text.strip()
    assert q.limits() == Limits(concurrency=2)


def test_f1_a_read_only_dashboard_shows_no_limits_form(engine: Engine, database_url: URL) -> None:
    with web_client("sync", engine, database_url, read_only=True) as c:
        Store(engine).queue("ro-limits").set_limits(Limits(concurrency=1))
        page = c.get("/queues/ro-limits")
        assert "concurrency 1" in page.text and 'data-action="limits"' not in page.text
        assert post(c, "/queues/ro-limits/limits", {"concurrency": "5"}).status_code == 403
