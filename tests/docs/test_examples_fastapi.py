"""D2 in an application: examples/fastapi_app end to end on asyncpg.

An HTTP request writes an order and defers its receipt job in one
transaction; ``alkstore_sa.testing.run_due(tasks)`` runs the job, whose
session-scoped task marks the order; a request that fails after the defer
leaves neither the order nor the job.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import AsyncIterator, Iterator
from types import ModuleType

import pytest
from sqlalchemy import URL, func, select

from alkstore_sa.testing import enqueued, run_due

pytest.importorskip("fastapi", reason="the FastAPI example needs fastapi (the dev extra has it)")
pytest.importorskip("asyncpg", reason="the FastAPI example runs on asyncpg (the dev extra has it)")
httpx = pytest.importorskip("httpx", reason="the test client needs httpx (the dev extra has it)")

MODULE = "examples.fastapi_app.app"


@pytest.fixture
def shop_module(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example module, imported afresh against this test's database."""
    url = database_url.set(drivername="postgresql+asyncpg")
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url.render_as_string(hide_password=False))
    monkeypatch.delenv("SHOP_WORKER_IN_APP", raising=False)
    sys.modules.pop(MODULE, None)
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.modules.pop(MODULE, None)


@pytest.fixture
async def shop(shop_module: ModuleType) -> AsyncIterator[ModuleType]:
    """The app with its lifespan entered (httpx's ASGITransport sends no lifespan events)."""
    async with shop_module.lifespan(shop_module.app):
        yield shop_module


def client(shop: ModuleType) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=shop.app), base_url="http://shop")


async def order_count(shop: ModuleType) -> int:
    async with shop.Sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(shop.Order)) or 0)


async def test_d2_fastapi_order_and_receipt_job_commit_together(shop: ModuleType) -> None:
    receipts = shop.store.queue("receipts")
    async with client(shop) as http:
        created = await http.post("/orders", json={"email": "ada@example.com"})
        assert created.status_code == 201, created.text
        order = created.json()

        [job] = await enqueued(receipts)
        assert job.id == order["job_id"]
        assert (await http.get(f"/orders/{order['id']}")).json()["receipted"] is False

        report = await run_due(shop.tasks)

        assert report.acked == [job.id]
        assert report.retried == [] and report.dead == []
        assert (await http.get(f"/orders/{order['id']}")).json()["receipted"] is True
        assert await enqueued(receipts) == []
        assert (await http.get("/healthz")).json() == {"status": "ok"}


async def test_d2_fastapi_failed_request_leaves_no_order_and_no_job(shop: ModuleType) -> None:
    async with client(shop) as http:
        failed = await http.post("/orders?fail=1", json={"email": "bob@example.com"})
    assert failed.status_code == 500
    assert await enqueued(shop.store.queue("receipts")) == []
    assert await order_count(shop) == 0
    assert (await run_due(shop.tasks)).runs == 0


async def test_d2_fastapi_order_receipted_by_the_lifespan_worker(
    shop_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHOP_WORKER_IN_APP=1: an AsyncWorker runs in the app's lifespan and stops with it."""
    monkeypatch.setenv("SHOP_WORKER_IN_APP", "1")
    shop = shop_module
    async with shop.lifespan(shop.app), client(shop) as http:
        order = (await http.post("/orders", json={"email": "cy@example.com"})).json()
        for _ in range(200):  # up to 10 s on a loaded machine; usually milliseconds
            if (await http.get(f"/orders/{order['id']}")).json()["receipted"]:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the lifespan worker did not mark the order receipted within 10 s")
    # The lifespan ended: the worker stopped and the engine was disposed of.
    workers = [t for t in asyncio.all_tasks() if "AsyncWorker.run" in repr(t.get_coro())]
    assert workers == []


async def test_r3_fastapi_enqueue_then_await_the_result(
    shop_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /quotes defers a job that keeps its result and awaits it; a lifespan worker runs it."""
    monkeypatch.setenv("SHOP_WORKER_IN_APP", "1")
    shop = shop_module
    async with shop.lifespan(shop.app), client(shop) as http:
        quoted = await http.post("/quotes?items=3&timeout=10")
        assert quoted.status_code == 200, quoted.text
        assert quoted.json() == {"order_total_cents": 3 * 1250 + 499, "shipping_cents": 499}


async def test_r3_fastapi_await_times_out_without_a_worker(shop: ModuleType) -> None:
    async with client(shop) as http:
        late = await http.post("/quotes?items=3&timeout=0.3")
    assert late.status_code == 504
    [job] = await enqueued(shop.store.queue("quotes"))  # still queued, will be kept when run
    report = await run_due(shop.tasks)
    assert report.acked == [job.id]
    kept = await shop.store.queue("quotes").get_job(job.id)
    assert kept.status == "completed"
    assert await shop.quote.result(job.id, timeout=1) == shop.Quote(
        order_total_cents=3 * 1250 + 499, shipping_cents=499
    )
