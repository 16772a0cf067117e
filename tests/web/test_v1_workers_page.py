"""V1 on the dashboard: the workers page lists every registered worker, idle ones too.

A newcomer could not tell whether any worker was alive: the page listed only
jobs in flight.  Here a real Worker with nothing to do runs against the test
database; the page shows it with its queues and concurrency, and it is gone
from the page after a graceful stop.  A worker not seen for 60 s shows as
gone (its ``last_seen`` is moved back in SQL, as the registry's own test does).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine, text

from alkstore_sa import Store, Worker

from .._web import web_client
from .._workers import wait_for


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def _idle_worker(store: Store, worker_id: str) -> tuple[Worker, threading.Thread]:
    worker = Worker(
        {store.queue("idle-a"): lambda job: None, store.queue("idle-b"): lambda job: None},
        concurrency=3,
        poll_interval=0.05,
        worker_id=worker_id,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_for(lambda: any(w.worker_id == worker_id for w in store.workers()), timeout=30)
    return worker, thread


def test_v1_an_idle_worker_is_on_the_workers_page_until_it_stops(
    client: Any, engine: Engine
) -> None:
    with Store(engine) as store:
        worker, thread = _idle_worker(store, "idle-worker-1")
        try:
            page = client.get("/workers")
            assert page.status_code == 200
            row = page.text.split('data-registered="idle-worker-1"', 1)[1].split("</tr>", 1)[0]
            assert ">alive<" in row
            assert "idle-a" in row and "idle-b" in row
            assert '<td class="num">3</td>' in row  # its concurrency
            assert "No job is in flight." in page.text  # and it holds none
        finally:
            worker.stop()
            thread.join(timeout=30)
        assert not thread.is_alive()
        assert 'data-registered="idle-worker-1"' not in client.get("/workers").text


def test_v1_a_worker_not_seen_for_a_minute_shows_as_gone(client: Any, engine: Engine) -> None:
    with Store(engine) as store:
        worker, thread = _idle_worker(store, "idle-worker-2")
        worker.stop()
        thread.join(timeout=30)
        # A killed worker's row stays; stand one in for it, last seen two minutes ago.
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO alkstore.workers (worker_id, hostname, pid, queues, concurrency,"
                    " started_at, last_seen, version) VALUES ('killed-1', 'h', 4242,"
                    " ARRAY['idle-a'], 1, now() - interval '3 minutes',"
                    " now() - interval '2 minutes', 'x')"
                )
            )
        page = client.get("/workers").text
        row = page.split('data-registered="killed-1"', 1)[1].split("</tr>", 1)[0]
        assert ">gone<" in row and "4242" in row
