"""W1, W2: the dashboard's routes, pages and actions, through an ASGI client, on both faces.

Every page renders from the real database; every action changes it through
the public queue operations and answers as W1 says (303 back for a plain
form post, a one-line text for the page's own fetch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine
from starlette.testclient import TestClient

from alkstore_sa import EnqueueOpts, Store
from alkstore_sa.web import create_app

from .._web import BASE_URL, post, web_client, within


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def _dead(store: Store, queue: str, n: int, error: str = "boom") -> list[int]:
    q = store.queue(queue)
    ids = q.enqueue_many([f"job {i}".encode() for i in range(n)])
    for _ in ids:
        h = q.claim_one("w")
        assert h is not None and h.fail(error)
    return ids


def test_w1_w2_overview_lists_every_queue_with_its_stats(client: TestClient, store: Store) -> None:
    q = store.queue("mail")
    q.enqueue_many([b"a", b"b"])
    q.enqueue(b"later", EnqueueOpts(delay=600))
    _dead(store, "reports", 1)
    store.queue("idle").pause()
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for name in ("mail", "reports", "idle"):
        assert f'data-queue="{name}"' in page.text
    row = page.text.split('data-queue="mail"')[1].split("</tr>")[0]
    assert [c for c in _cells(row)][:2] == ["2", "1"]  # due, scheduled
    assert "paused" in page.text.split('data-queue="idle"')[1].split("</tr>")[0]
    assert "Throughput" in page.text and "Counts read" in page.text


def _cells(row: str) -> list[str]:
    import re

    return [m.strip() for m in re.findall(r'<td class="num[^"]*">([^<]*)<', row)]


def test_w1_w2_queue_page_counts_lists_and_pages(client: TestClient, store: Store) -> None:
    q = store.queue("paged")
    ids = q.enqueue_many([f"p{i}".encode() for i in range(60)])
    q.enqueue(b"later", EnqueueOpts(delay=600))
    held = q.claim_one("w-1")
    assert held is not None
    page = client.get("/queues/paged")
    assert page.status_code == 200
    assert 'data-count="due"' in page.text and 'data-action="pause"' in page.text
    first = client.get("/queues/paged/jobs", params={"status": "due"})
    shown = [int(x) for x in _ids(first.text)]
    assert len(shown) == 50 and shown == sorted(shown, reverse=True)
    assert "before=" in first.text  # a next page
    second = client.get("/queues/paged/jobs", params={"status": "due", "before": shown[-1]})
    rest = [int(x) for x in _ids(second.text)]
    assert set(rest) | set(shown) == set(ids) - {held.id}
    scheduled = _ids(client.get("/queues/paged/jobs", params={"status": "scheduled"}).text)
    assert len(scheduled) == 1
    processing = _ids(client.get("/queues/paged/jobs", params={"status": "processing"}).text)
    assert processing == [str(held.id)]
    assert client.get("/queues/paged/jobs", params={"status": "bogus"}).status_code == 400
    assert client.get("/queues/paged/jobs", params={"before": "x"}).status_code == 400


def _ids(html: str) -> list[str]:
    import re

    return re.findall(r'<tr data-job-id="(\d+)"', html)


def test_w1_w2_job_page_shows_fields_payload_and_error_history(
    client: TestClient, store: Store
) -> None:
    q = store.queue("detail")
    text_id = q.enqueue(b'{"hello": "world"}')
    h = q.claim_one("w")
    assert h is not None and h.retry("first try failed", delay=0)
    h = q.claim_one("w")
    assert h is not None and h.fail("gave up")
    page = client.get(f"/queues/detail/jobs/{text_id}")
    assert page.status_code == 200
    assert "{&#34;hello&#34;: &#34;world&#34;}" in page.text
    assert "first try failed" in page.text and "gave up" in page.text
    assert "attempt 1" in page.text and "attempt 2" in page.text
    binary = q.enqueue(bytes(range(256)) * 300)  # 76,800 bytes, binary
    page = client.get(f"/queues/detail/jobs/{binary}")
    assert "binary (hex)" in page.text and "first 65,536 shown" in page.text
    assert "00000000  00 01 02 03" in page.text
    assert client.get("/queues/detail/jobs/999999").status_code == 404
    assert client.get(f"/queues/other/jobs/{text_id}").status_code == 404


def test_w1_w2_dead_letters_grouped_by_error(client: TestClient, store: Store) -> None:
    _dead(store, "dl", 3, "TimeoutError")
    _dead(store, "dl", 1, "KeyError: 'x'")
    page = client.get("/queues/dl/dead")
    assert page.status_code == 200
    groups = page.text.split('class="grid groups"')[1].split("</table>")[0]
    assert groups.index("TimeoutError") < groups.index("KeyError")  # biggest first
    assert ">3<" in groups
    one = client.get("/queues/dl/dead", params={"error": "KeyError: 'x'"})
    assert len(_ids(one.text)) == 1


def test_w1_w2_workers_page_lists_jobs_in_flight(client: TestClient, store: Store) -> None:
    q = store.queue("busy")
    q.enqueue_many([b"1", b"2", b"3"])
    q.claim_batch("host-a:1", 2)
    q.claim_batch("host-b:2", 1)
    page = client.get("/workers")
    assert page.status_code == 200
    assert 'data-worker="host-a:1"' in page.text and 'data-worker="host-b:2"' in page.text
    row = page.text.split('data-worker="host-a:1"')[1].split("</tr>")[0]
    assert ">2<" in row


def test_w1_pause_and_resume_actions(client: TestClient, store: Store) -> None:
    q = store.queue("pr")
    r = post(client, "/queues/pr/pause", {"next": "/queues/pr"})
    assert r.status_code == 303 and r.headers["location"].startswith("/queues/pr?done=")
    assert q.stats().paused is True
    page = client.get("/queues/pr")
    assert 'data-action="resume"' in page.text and 'data-action="pause"' not in page.text
    r = post(client, "/queues/pr/resume", headers={"X-Alkstore-Live": "1"})
    assert r.status_code == 200 and r.text == "resumed pr"
    assert q.stats().paused is False


def test_w1_requeue_one_selected_all_and_all_of_one_error(client: TestClient, store: Store) -> None:
    a = _dead(store, "rq", 3, "A")
    b = _dead(store, "rq", 4, "B")
    q = store.queue("rq")
    r = post(client, "/queues/rq/requeue", {"id": str(a[0])}, headers={"X-Alkstore-Live": "1"})
    assert r.text == "requeued 1 job(s)"
    r = post(client, "/queues/rq/requeue", [("id", str(a[1])), ("id", str(b[0]))])
    assert r.status_code == 303
    assert {q.get_job(i).status for i in (a[0], a[1], b[0])} == {"pending"}  # type: ignore[union-attr]
    r = post(client, "/queues/rq/requeue", {"all": "1", "limit": "2", "error": "B"})
    assert q.get_job(b[1]).status == "pending" and q.get_job(b[2]).status == "pending"  # type: ignore[union-attr]
    assert q.get_job(b[3]).status == "dead"  # type: ignore[union-attr]  # limit 2
    assert q.get_job(a[2]).status == "dead"  # type: ignore[union-attr]  # other error
    r = post(client, "/queues/rq/requeue", {"all": "1"}, headers={"X-Alkstore-Live": "1"})
    assert r.text == "requeued 2 job(s)" and q.stats().dead == 0
    for bad in ({}, {"id": "x"}, {"all": "1", "limit": "0"}, {"id": "1", "all": "1"}):
        assert post(client, "/queues/rq/requeue", bad).status_code == 400


def test_w1_purge_selected_and_all_matching(client: TestClient, store: Store) -> None:
    a = _dead(store, "pg", 2, "A")
    b = _dead(store, "pg", 3, "B")
    q = store.queue("pg")
    post(client, "/queues/pg/purge", {"id": str(a[0])})
    assert q.get_job(a[0]) is None
    post(client, "/queues/pg/purge", {"all": "1", "limit": "10", "error": "B"})
    assert all(q.get_job(i) is None for i in b) and q.get_job(a[1]) is not None
    r = post(
        client, "/queues/pg/purge", {"all": "1", "limit": "5"}, headers={"X-Alkstore-Live": "1"}
    )
    assert r.text == "purged 1 dead job(s)" and q.stats().dead == 0


def test_w1_cancel_action(client: TestClient, store: Store) -> None:
    q = store.queue("cx")
    job = q.enqueue(b"x")
    r = post(client, f"/queues/cx/jobs/{job}/cancel", headers={"X-Alkstore-Live": "1"})
    assert r.text == f"cancelled job {job}" and q.get_job(job) is None
    r = post(client, f"/queues/cx/jobs/{job}/cancel", headers={"X-Alkstore-Live": "1"})
    assert r.text == f"job {job} was not pending or processing"


def test_w1_every_action_carries_its_data_action(client: TestClient, store: Store) -> None:
    dead = _dead(store, "acts", 1)
    live = store.queue("acts").enqueue(b"x")
    pages = "".join(
        client.get(p).text
        for p in (
            "/queues/acts",
            "/queues/acts/dead",
            f"/queues/acts/jobs/{live}",
            f"/queues/acts/jobs/{dead[0]}",
        )
    )
    for action in ("pause", "requeue", "purge", "cancel"):
        assert f'data-action="{action}"' in pages
    store.queue("acts").pause()
    # A change made elsewhere shows once the counts' cache turns over (W5: within 2 s).
    assert within(2.0, lambda: 'data-action="resume"' in client.get("/queues/acts").text)


def test_w1_live_fragment_is_the_live_part_only(client: TestClient, store: Store) -> None:
    store.queue("frag").enqueue(b"x")
    full = client.get("/queues/frag")
    part = client.get("/queues/frag", headers={"X-Alkstore-Live": "1"})
    assert full.text.startswith("<!doctype html>") and "<html" not in part.text
    assert 'data-count="due"' in part.text


def test_w1_queue_names_with_slashes_and_odd_characters_route(
    client: TestClient, store: Store
) -> None:
    from urllib.parse import quote

    name = "a/b?c#d%e"
    job = store.queue(name).enqueue(b"x")
    path = "/queues/" + quote(name, safe="")
    assert client.get(path).status_code == 200
    assert client.get(path + f"/jobs/{job}").status_code == 200
    assert post(client, path + "/pause").status_code == 303
    assert store.queue(name).stats().paused is True
    assert client.get("/queues/" + quote("pg_bad", safe="")).status_code == 404  # invalid name


def test_w1_mounts_under_a_prefix_in_a_starlette_app(engine: Engine) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    with Store(engine) as store:
        store.queue("mounted").enqueue(b"x")
        host = Starlette(routes=[Mount("/admin/queues", app=create_app(store))])
        with TestClient(host, base_url=BASE_URL) as c:
            page = c.get("/admin/queues/")
            assert page.status_code == 200
            assert 'href="/admin/queues/queues/mounted"' in page.text
            assert 'href="/admin/queues/static/alkstore.css"' in page.text
            assert c.get("/admin/queues/static/live.js").status_code == 200
            queue_page = c.get("/admin/queues/queues/mounted").text
            assert 'name="next" value="/admin/queues/queues/mounted"' in queue_page
            r = post(
                c, "/admin/queues/queues/mounted/pause", {"next": "/admin/queues/queues/mounted"}
            )
            assert r.status_code == 303
            assert r.headers["location"].startswith("/admin/queues/queues/mounted?done=")
            assert store.queue("mounted").stats().paused is True
