"""The asyncio face on its own terms: AsyncSession transactions, tasks, shared data."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from sqlalchemy import URL, Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from alkstore_sa import AsyncStore, Store, StoreClosedError


async def _make_orders_table(async_engine: AsyncEngine) -> None:
    async with async_engine.begin() as conn:
        await conn.execute(text("create table orders (id int primary key, sent bool)"))


async def test_q6_async_session_enqueue_commits_with_the_callers_rows(
    async_engine: AsyncEngine,
) -> None:
    await _make_orders_table(async_engine)
    store = AsyncStore(async_engine)
    q = store.queue("receipts")
    async with AsyncSession(async_engine) as session, session.begin():
        await session.execute(text("insert into orders values (1, false)"))
        job_id = await q.enqueue(b"order-1", session=session)
    job = await q.get_job(job_id)
    assert job is not None and job.payload == b"order-1"


async def test_q6_async_session_rollback_discards_the_enqueue(async_engine: AsyncEngine) -> None:
    await _make_orders_table(async_engine)
    store = AsyncStore(async_engine)
    q = store.queue("receipts")
    async with AsyncSession(async_engine) as session:
        await session.execute(text("insert into orders values (1, false)"))
        job_id = await q.enqueue(b"order-1", session=session)
        await session.rollback()
    assert await q.get_job(job_id) is None
    async with async_engine.connect() as conn:
        assert (await conn.execute(text("select count(*) from orders"))).scalar() == 0


async def test_q6_async_connection_enqueue_many_in_callers_transaction(
    async_engine: AsyncEngine,
) -> None:
    store = AsyncStore(async_engine)
    q = store.queue("receipts")
    async with async_engine.connect() as conn:
        ids = await q.enqueue_many([b"a", b"b"], session=conn)
        await conn.rollback()
    assert [await q.get_job(i) for i in ids] == [None, None]
    async with async_engine.connect() as conn:
        ids = await q.enqueue_many([b"a", b"b"], session=conn)
        await conn.commit()
    assert [(await q.get_job(i)).payload for i in ids] == [b"a", b"b"]  # type: ignore[union-attr]


@pytest.mark.parametrize("commit", [True, False])
async def test_q16_async_ack_in_session_commits_or_rolls_back_with_the_work(
    async_engine: AsyncEngine, commit: bool
) -> None:
    await _make_orders_table(async_engine)
    store = AsyncStore(async_engine)
    q = store.queue("receipts")
    job_id = await q.enqueue(b"1")
    handle = await q.claim_one("w1")
    assert handle is not None
    async with AsyncSession(async_engine) as session:
        await session.execute(text("insert into orders values (1, true)"))
        assert await handle.ack(session=session) is True
        if commit:
            await session.commit()
        else:
            await session.rollback()
    job = await q.get_job(job_id)
    async with async_engine.connect() as conn:
        orders = (await conn.execute(text("select count(*) from orders"))).scalar()
    if commit:
        assert job is None and orders == 1
    else:
        assert job is not None and job.status == "processing" and orders == 0


async def test_q8_asyncio_tasks_claim_each_job_once(async_engine: AsyncEngine) -> None:
    store = AsyncStore(async_engine)
    q = store.queue("race")
    ids = await q.enqueue_many([str(i).encode() for i in range(240)])

    async def worker(name: str) -> list[int]:
        got: list[int] = []
        for _ in range(40):
            handle = await q.claim_one(name)
            if handle is not None:
                got.append(handle.id)
        return got

    claimed = [
        i for batch in await asyncio.gather(*(worker(f"w{n}") for n in range(6))) for i in batch
    ]
    counts = Counter(claimed)
    assert [i for i, c in counts.items() if c > 1] == []
    assert sorted(claimed) == sorted(ids)


async def test_sync_and_async_stores_see_each_others_jobs(
    engine: Engine, async_engine: AsyncEngine
) -> None:
    sync_q = Store(engine).queue("shared")
    async_q = AsyncStore(async_engine).queue("shared")
    from_sync = await asyncio.to_thread(sync_q.enqueue, b"from sync")
    from_async = await async_q.enqueue(b"from async")
    handle = await async_q.claim_one("async-worker")
    assert handle is not None and handle.id == from_sync
    sync_handle = await asyncio.to_thread(sync_q.claim_one, "sync-worker")
    assert sync_handle is not None and sync_handle.id == from_async
    assert await handle.ack() is True
    assert await asyncio.to_thread(sync_handle.ack) is True


async def test_q29_async_store_from_url_owns_and_closes_its_engine(database_url: URL) -> None:
    async with AsyncStore.from_url(database_url) as store:
        q = store.queue("owned")
        assert await q.enqueue(b"x") > 0
    assert store.closed
    with pytest.raises(StoreClosedError):
        await q.enqueue(b"y")
    await store.close()  # idempotent
