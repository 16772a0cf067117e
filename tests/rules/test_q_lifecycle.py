"""Q29: a closed store fails closed; close() is idempotent; stores are context managers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from alkstore_sa import AsyncStore, Store, StoreClosedError

from .._qtools import live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of


def test_q29_a_closed_store_fails_every_op_including_earlier_handles(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q29")
    first = q.enqueue(b"p")
    q.enqueue_many([b"1", b"2", b"3", b"4"])
    handles = q.claim_batch("w", 4)
    assert handles[0].id == first
    spy = SqlSpy(sync_engine_of(qs))
    qs.close()
    assert qs.closed is True
    ops: dict[str, Callable[[], object]] = {
        "store.queue": lambda: qs.queue("q29"),
        "enqueue": lambda: q.enqueue(b"x"),
        "enqueue_many": lambda: q.enqueue_many([b"x"]),
        "enqueue_many-empty": lambda: q.enqueue_many([]),
        "claim_one": lambda: q.claim_one("w"),
        "claim_batch": lambda: q.claim_batch("w", 5),
        "claim_batch-0": lambda: q.claim_batch("w", 0),
        "ack_batch": lambda: q.ack_batch([h.id for h in handles]),
        "ack_batch-empty": lambda: q.ack_batch([]),
        "cancel": lambda: q.cancel(first),
        "get_job": lambda: q.get_job(first),
        "sweep_expired": lambda: q.sweep_expired(),
        "handle.ack": lambda: handles[0].ack(),
        "handle.retry": lambda: handles[1].retry("e", delay=0),
        "handle.fail": lambda: handles[2].fail("e"),
        "handle.heartbeat": lambda: handles[3].heartbeat(30),
    }
    try:
        with spy.no_sql():
            for name, op in ops.items():
                with pytest.raises(StoreClosedError):
                    op()
                    pytest.fail(f"{name} ran on a closed store")
    finally:
        spy.close()
    for h in handles:  # nothing reached the database
        row = live_row(engine, h.id)
        assert row is not None and row["status"] == "processing"
    # A handle's plain attributes are still readable.
    assert handles[0].payload == b"p" and q.name == "q29" and q.channel


def test_q29_close_is_idempotent(qs: Any) -> None:
    q = qs.queue("q29")
    q.enqueue(b"x")
    qs.close()
    qs.close()
    assert qs.closed is True
    with pytest.raises(StoreClosedError):
        q.get_job(1)


def test_q29_store_is_a_context_manager(engine: Engine) -> None:
    with Store(engine) as store:
        q = store.queue("q29")
        q.enqueue(b"x")
        assert store.closed is False
    assert store.closed is True
    with pytest.raises(StoreClosedError):
        q.claim_one("w")
    with pytest.raises(RuntimeError), Store(engine) as failing:
        raise RuntimeError("the block failed")
    assert failing.closed is True
    # Closing a store leaves the caller's engine alone.
    with Store(engine) as again:
        assert again.queue("q29").claim_one("w") is not None


async def test_q29_async_store_is_an_async_context_manager(async_engine: AsyncEngine) -> None:
    async with AsyncStore(async_engine) as store:
        q = store.queue("q29")
        await q.enqueue(b"x")
        handle = await q.claim_one("w")
        assert handle is not None
    assert store.closed is True
    with pytest.raises(StoreClosedError):
        await handle.ack()
    with pytest.raises(StoreClosedError):
        store.queue("q29")
    await store.close()  # idempotent
    async with AsyncStore(async_engine) as again:  # the engine is still the caller's
        assert await again.queue("q29").get_job(handle.id) is not None


def _backends(engine: Engine, app: str) -> int:
    rows = sql(
        engine,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = :a",
        a=app,
    )
    return int(rows[0]["n"])


def _wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()  # type: ignore[no-any-return]


def test_q29_from_url_store_disposes_its_own_engine_on_close(
    database_url: URL, engine: Engine
) -> None:
    app = "alkstore-q29-owned"
    store = Store.from_url(database_url, connect_args={"application_name": app})
    store.queue("q29").enqueue(b"x")
    assert _backends(engine, app) == 1  # the pooled connection stays open...
    store.close()
    assert _wait_for(lambda: _backends(engine, app) == 0)  # ...until close() disposes it
    store.close()
