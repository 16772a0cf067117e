"""W4: every text the dashboard shows is escaped -- queue names, payloads, errors, tracebacks,
worker ids -- so a ``<script>`` or ``"><img onerror=...>`` renders as text on every page,
in the full page and in the live fragment alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import URL, Engine
from starlette.testclient import TestClient

from alkstore_sa import Store

from .._web import web_client

# No whitespace: a valid queue name (Q2) that would break out of an attribute or open a tag.
QUEUE = '"><img/src=x/onerror=alert(1)><script>alert(2)</script>'
PROBE = '<script>alert(3)</script>"><img src=x onerror="alert(4)">\'<svg/onload=alert(5)>'
WORKER = '"><script>alert(6)</script>'
RAW = ("<script>", "<img", "<svg/", '"><img', '"><script', "'<svg")


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def _hostile(store: Store) -> dict[str, int]:
    q = store.queue(QUEUE)
    dead = q.enqueue(PROBE.encode())
    h = q.claim_one(WORKER)
    assert h is not None and h.retry(PROBE, delay=0)
    h = q.claim_one(WORKER)
    assert h is not None and h.fail(PROBE)
    live = q.enqueue(PROBE.encode())
    assert q.claim_one(WORKER) is not None
    return {"dead": dead, "live": live}


def _pages(ids: dict[str, int]) -> list[str]:
    base = "/queues/" + quote(QUEUE, safe="")
    return [
        "/",
        base,
        base + "/jobs?status=processing",
        base + "/jobs?status=dead",
        base + "/dead",
        base + "/dead?error=" + quote(PROBE, safe=""),
        base + f"/jobs/{ids['dead']}",
        base + f"/jobs/{ids['live']}",
        "/workers",
    ]


def test_w4_hostile_names_payloads_errors_and_workers_render_as_text(
    client: TestClient, store: Store
) -> None:
    ids = _hostile(store)
    for path in _pages(ids):
        for live in (False, True):
            headers = {"X-Alkstore-Live": "1"} if live else {}
            page = client.get(path, headers=headers)
            assert page.status_code == 200, path
            body = page.text
            for raw in RAW:
                assert raw not in body, (path, live, raw)
    dead_page = client.get("/queues/" + quote(QUEUE, safe="") + f"/jobs/{ids['dead']}").text
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in dead_page  # shown, as text
    assert "&lt;img/src=x/onerror=alert(1)&gt;" in client.get("/").text
    assert "&lt;script&gt;alert(6)&lt;/script&gt;" in client.get("/workers").text


def test_w4_links_to_hostile_names_stay_inside_their_attribute(
    client: TestClient, store: Store
) -> None:
    _hostile(store)
    page = client.get("/").text
    assert 'href="/queues/' + quote(QUEUE, safe="") + '"' in page
    assert f'data-queue="{QUEUE}"' not in page  # the quote is escaped (&#34;), not raw


def test_w4_flash_message_from_the_url_is_escaped(client: TestClient) -> None:
    page = client.get("/?done=" + quote(PROBE, safe=""))
    assert all(raw not in page.text for raw in RAW)
