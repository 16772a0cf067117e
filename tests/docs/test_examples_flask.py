"""D2 in an application: examples/flask_app end to end on psycopg.

An HTTP request writes an order and defers its receipt job in one
transaction; ``alkstore_sa.testing.run_due(tasks)`` runs the job, whose
session-scoped task marks the order; a request that fails after the defer
leaves neither the order nor the job.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType

import pytest
from sqlalchemy import URL, func, select
from sqlalchemy.orm import Session

from alkstore_sa import Worker
from alkstore_sa.testing import enqueued, run_due

pytest.importorskip("flask", reason="the Flask example needs flask (the dev extra has it)")

MODULE = "examples.flask_app.app"


@pytest.fixture
def shop(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example module, imported afresh against this test's database, its tables made."""
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", database_url.render_as_string(hide_password=False))
    sys.modules.pop(MODULE, None)
    module = importlib.import_module(MODULE)
    try:
        result = module.app.test_cli_runner().invoke(args=["init-db"])
        assert result.exit_code == 0, result.output
        assert "database ready" in result.output
        yield module
    finally:
        module.store.close()
        module.engine.dispose()
        sys.modules.pop(MODULE, None)


def order_count(shop: ModuleType) -> int:
    with Session(shop.engine) as session:
        return int(session.scalar(select(func.count()).select_from(shop.Order)) or 0)


def test_d2_flask_order_and_receipt_job_commit_together(shop: ModuleType) -> None:
    receipts = shop.store.queue("receipts")
    http = shop.app.test_client()
    created = http.post("/orders", json={"email": "ada@example.com"})
    assert created.status_code == 201, created.text
    order = created.get_json()

    [job] = enqueued(receipts)
    assert job.id == order["job_id"]
    assert http.get(f"/orders/{order['id']}").get_json()["receipted"] is False

    report = run_due(shop.tasks)

    assert report.acked == [job.id]
    assert report.retried == [] and report.dead == []
    assert http.get(f"/orders/{order['id']}").get_json()["receipted"] is True
    assert enqueued(receipts) == []
    assert http.get("/healthz").get_json() == {"status": "ok"}


def test_d2_flask_failed_request_leaves_no_order_and_no_job(shop: ModuleType) -> None:
    failed = shop.app.test_client().post("/orders?fail=1", json={"email": "bob@example.com"})
    assert failed.status_code == 500
    assert enqueued(shop.store.queue("receipts")) == []
    assert order_count(shop) == 0
    assert run_due(shop.tasks).runs == 0


def test_d2_flask_order_receipted_by_a_real_worker(shop: ModuleType) -> None:
    """The same flow with a Worker in a thread, as `alkstore worker ...:tasks` runs it."""
    worker = Worker(shop.tasks, poll_interval=0.2, shutdown_timeout=5)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        http = shop.app.test_client()
        order = http.post("/orders", json={"email": "cy@example.com"}).get_json()
        deadline = time.monotonic() + 10  # usually milliseconds; generous on a loaded machine
        while not http.get(f"/orders/{order['id']}").get_json()["receipted"]:
            assert time.monotonic() < deadline, "the worker did not receipt the order in 10 s"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert enqueued(shop.store.queue("receipts")) == []
