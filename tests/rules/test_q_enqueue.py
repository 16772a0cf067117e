"""Q4-Q7: option resolution, payloads, transactions and the wake channel."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import AsyncSession as AsyncOrmSession
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, EnqueueOpts, QueueOpts, Store

from .._qtools import live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of

SEC = timedelta(seconds=1)


# -- Q4 ------------------------------------------------------------------------


def test_q4_defaults_come_from_the_queue_and_one_clock_read(qs: Any, engine: Engine) -> None:
    opts = QueueOpts(priority=7, max_attempts=4, visibility_timeout=12.5)
    q = qs.queue("q4", opts)
    job = q.get_job(q.enqueue(b"x"))
    assert job is not None
    assert (job.priority, job.max_attempts, job.visibility_timeout) == (7, 4, 12.5)
    assert job.run_at == job.created_at  # due at the moment it was enqueued
    assert job.expires_at is None
    assert (job.status, job.attempts, job.worker_id, job.claim_deadline) == (
        "pending",
        0,
        None,
        None,
    )


def test_q4_delay_is_relative_to_the_enqueue_clock_read(qs: Any) -> None:
    q = qs.queue("q4")
    cases: list[tuple[float | timedelta, timedelta]] = [
        (90, 90 * SEC),
        (0.25, timedelta(milliseconds=250)),
        (timedelta(milliseconds=1500), timedelta(milliseconds=1500)),
        (0, timedelta(0)),
    ]
    for delay, expected in cases:
        job = q.get_job(q.enqueue(b"x", EnqueueOpts(delay=delay)))
        assert job is not None and job.run_at - job.created_at == expected


def test_q4_delay_wins_over_run_at(qs: Any) -> None:
    q = qs.queue("q4")
    past = datetime(2000, 1, 1, tzinfo=UTC)
    future = datetime(2100, 1, 1, tzinfo=UTC)
    later = q.get_job(q.enqueue(b"x", EnqueueOpts(delay=5, run_at=past)))
    assert later is not None and later.run_at - later.created_at == 5 * SEC
    now = q.get_job(q.enqueue(b"x", EnqueueOpts(delay=0, run_at=future)))
    assert now is not None and now.run_at == now.created_at
    handle = q.claim_one("w")  # delay=0 won: due now despite run_at in 2100
    assert handle is not None and handle.id == now.id


def test_q4_run_at_alone_is_stored_exactly_in_any_zone(qs: Any) -> None:
    q = qs.queue("q4")
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-5)))
    job = q.get_job(q.enqueue(b"x", EnqueueOpts(run_at=run_at)))
    assert job is not None and job.run_at == run_at
    assert job.run_at.utcoffset() is not None  # an aware datetime comes back


def test_q4_expires_in_is_relative_to_the_same_clock_read(qs: Any) -> None:
    q = qs.queue("q4")
    job = q.get_job(q.enqueue(b"x", EnqueueOpts(delay=30, expires_in=60)))
    assert job is not None
    assert job.run_at - job.created_at == 30 * SEC
    assert job.expires_at is not None
    assert job.expires_at - job.created_at == 60 * SEC  # not run_at + 60


def test_q4_expires_in_from_the_queue_unless_the_job_says(qs: Any) -> None:
    q = qs.queue("q4", QueueOpts(expires_in=timedelta(minutes=10)))
    stamped = q.get_job(q.enqueue(b"x"))
    assert stamped is not None and stamped.expires_at is not None
    assert stamped.expires_at - stamped.created_at == timedelta(minutes=10)
    own = q.get_job(q.enqueue(b"x", EnqueueOpts(expires_in=2.5)))
    assert own is not None and own.expires_at is not None
    assert own.expires_at - own.created_at == timedelta(seconds=2.5)


def test_q4_max_attempts_override_is_used(qs: Any, engine: Engine) -> None:
    q = qs.queue("q4", QueueOpts(max_attempts=5))
    job_id = q.enqueue(b"x", EnqueueOpts(max_attempts=1))
    job = q.get_job(job_id)
    assert job is not None and job.max_attempts == 1
    handle = q.claim_one("w")
    assert handle is not None and handle.retry("boom", delay=0) is True
    dead = q.get_job(job_id)  # one attempt allowed, one used: retry buried it
    assert dead is not None and dead.status == "dead" and dead.last_error == "boom"


def test_q4_priority_from_the_job_else_the_queue(qs: Any) -> None:
    q = qs.queue("q4", QueueOpts(priority=7))
    for given, expected in [(None, 7), (-3, -3), (0, 0), (2**31 - 1, 2**31 - 1)]:
        job = q.get_job(q.enqueue(b"x", EnqueueOpts(priority=given)))
        assert job is not None and job.priority == expected


def test_q4_enqueue_many_shares_one_clock_read_and_stamps(qs: Any) -> None:
    q = qs.queue("q4", QueueOpts(priority=2))
    ids = q.enqueue_many([b"a", b"b", b"c"], EnqueueOpts(delay=3, expires_in=9))
    jobs = [q.get_job(i) for i in ids]
    assert all(j is not None for j in jobs)
    assert len({(j.created_at, j.run_at, j.expires_at, j.priority) for j in jobs if j}) == 1


def test_q4_clock_is_the_statement_time_in_a_long_caller_transaction(
    store: Store, engine: Engine
) -> None:
    q = store.queue("q4")
    with Session(engine) as session:
        txn_start = session.execute(text("SELECT now()")).scalar_one()
        session.execute(text("SELECT pg_sleep(0.05)"))
        job_id = q.enqueue(b"x", EnqueueOpts(delay=1), session=session)
        session.commit()
    job = q.get_job(job_id)
    assert job is not None
    assert job.created_at - txn_start >= timedelta(milliseconds=50)
    assert job.run_at - job.created_at == SEC


# -- Q5 ------------------------------------------------------------------------


def test_q5_payload_bytes_round_trip_exactly(qs: Any) -> None:
    q = qs.queue("q5")
    payloads = [b"", b"\x00", b"a\x00b\x00", bytes(range(256)), b"\xff\xfe" * 1000, "é".encode()]
    ids = [q.enqueue(p) for p in payloads]
    for job_id, payload in zip(ids, payloads, strict=True):
        job = q.get_job(job_id)
        assert job is not None and job.payload == payload and type(job.payload) is bytes
    claimed = {h.id: h.payload for h in q.claim_batch("w", 10)}
    assert claimed == dict(zip(ids, payloads, strict=True))


def test_q5_large_payload_round_trips(qs: Any) -> None:
    q = qs.queue("q5")
    big = bytes(range(256)) * (4 * 4096)  # 4 MiB, every byte value
    job_id = q.enqueue(big)
    handle = q.claim_one("w")
    assert handle is not None and handle.id == job_id and handle.payload == big


def test_q5_bytearray_and_memoryview_are_accepted(qs: Any) -> None:
    q = qs.queue("q5")
    buf = bytearray(b"mutable\x00")
    view = memoryview(b"abcdef")
    strided = view[::2]  # not contiguous
    ids = q.enqueue_many([buf, view, strided, memoryview(bytearray(b""))])
    buf[0:1] = b"M"  # a change after the enqueue does not reach the stored job
    got = [q.get_job(i) for i in ids]
    assert [j.payload if j else None for j in got] == [b"mutable\x00", b"abcdef", b"ace", b""]
    one = q.get_job(q.enqueue(bytearray(b"\x00\x01")))
    assert one is not None and one.payload == b"\x00\x01"


def test_q5_enqueue_many_returns_ids_in_input_order(qs: Any) -> None:
    q = qs.queue("q5")
    payloads = [f"{i}".encode() * (i % 7) for i in range(50)]
    ids = q.enqueue_many(payloads)
    assert len(ids) == 50 and len(set(ids)) == 50
    for job_id, payload in zip(ids, payloads, strict=True):
        job = q.get_job(job_id)
        assert job is not None and job.payload == payload
    assert q.enqueue_many([]) == []
    assert q.enqueue_many(iter([b"gen"])) != []


# -- Q6 ------------------------------------------------------------------------


def _count(engine: Engine, queue: str) -> int:
    return len(sql(engine, "SELECT id FROM alkstore.jobs WHERE queue = :q", q=queue))


def test_q6_without_session_enqueue_commits_on_its_own(qs: Any, engine: Engine) -> None:
    q = qs.queue("q6")
    job_id = q.enqueue(b"x")
    ids = q.enqueue_many([b"a", b"b"])
    # Visible from another connection at once: already committed.
    assert live_row(engine, job_id) is not None
    assert _count(engine, "q6") == 3 and all(live_row(engine, i) for i in ids)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_q6_session_enqueue_follows_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("q6")
    with Session(engine) as session:
        session.execute(text("CREATE TABLE public.side (v text)"))
        session.execute(text("INSERT INTO public.side VALUES ('mine')"))
        one = q.enqueue(b"x", session=session)
        many = q.enqueue_many([b"a", b"b"], session=session)
        assert _count(engine, "q6") == 0  # not visible outside before the commit
        getattr(session, outcome)()
    kept = outcome == "commit"
    assert (q.get_job(one) is not None) is kept
    assert all((q.get_job(i) is not None) is kept for i in many)
    assert _count(engine, "q6") == (3 if kept else 0)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_q6_connection_enqueue_follows_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("q6")
    with engine.connect() as conn:
        job_id = q.enqueue(b"x", session=conn)
        assert conn.in_transaction()
        getattr(conn, outcome)()
    assert (q.get_job(job_id) is not None) is (outcome == "commit")


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_q6_async_session_enqueue_follows_the_callers_transaction(
    async_engine: AsyncEngine, engine: Engine, outcome: str
) -> None:
    store = AsyncStore(async_engine)
    q = store.queue("q6")
    async with AsyncOrmSession(async_engine) as session:
        await session.execute(text("CREATE TABLE public.side (v text)"))
        one = await q.enqueue(b"x", session=session)
        many = await q.enqueue_many([b"a", b"b"], session=session)
        assert _count(engine, "q6") == 0
        await getattr(session, outcome)()
    kept = outcome == "commit"
    assert (await q.get_job(one) is not None) is kept
    assert _count(engine, "q6") == (3 if kept else 0) and len(many) == 2


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_q6_async_connection_enqueue_follows_the_callers_transaction(
    async_engine: AsyncEngine, outcome: str
) -> None:
    store = AsyncStore(async_engine)
    q = store.queue("q6")
    async with async_engine.connect() as conn:
        job_id = await q.enqueue(b"x", session=conn)
        assert conn.in_transaction()
        await getattr(conn, outcome)()
    assert (await q.get_job(job_id) is not None) is (outcome == "commit")


def test_q6_a_session_of_the_other_api_is_refused(
    store: Store, async_engine: AsyncEngine, engine: Engine
) -> None:
    q = store.queue("q6")
    with pytest.raises(TypeError):
        q.enqueue(b"x", session=AsyncOrmSession(async_engine))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.enqueue(b"x", session=engine)  # type: ignore[arg-type]
    assert _count(engine, "q6") == 0


async def test_q6_async_store_refuses_a_sync_session(
    async_engine: AsyncEngine, engine: Engine
) -> None:
    q = AsyncStore(async_engine).queue("q6")
    with Session(engine) as session, pytest.raises(TypeError):
        await q.enqueue(b"x", session=session)  # type: ignore[arg-type]
    assert _count(engine, "q6") == 0


# -- Q7 ------------------------------------------------------------------------


@contextmanager
def listening(engine: Engine, channel: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection that LISTENs on ``channel`` (quoted as an identifier)."""
    args, kwargs = engine.dialect.create_connect_args(engine.url)
    conn = psycopg.connect(*args, **kwargs, autocommit=True)
    try:
        conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
        yield conn
    finally:
        conn.close()


def _received(conn: psycopg.Connection[Any], timeout: float) -> list[psycopg.Notify]:
    return list(conn.notifies(timeout=timeout))


def _one_then_quiet(conn: psycopg.Connection[Any]) -> list[psycopg.Notify]:
    got = list(conn.notifies(timeout=5.0, stop_after=1))
    return got + _received(conn, 0.2)


def test_q7_a_committed_enqueue_notifies_its_channel_once(qs: Any, engine: Engine) -> None:
    q = qs.queue("q7")
    with listening(engine, q.channel) as conn:
        q.enqueue(b"x")
        got = _one_then_quiet(conn)
    assert [(n.channel, n.payload) for n in got] == [(q.channel, "")]


def test_q7_enqueue_many_sends_one_notification_per_statement(qs: Any, engine: Engine) -> None:
    q = qs.queue("q7")
    with listening(engine, q.channel) as conn:
        q.enqueue_many([b"%d" % i for i in range(25)])
        assert len(_one_then_quiet(conn)) == 1
        q.enqueue_many([b"a", b"b"])
        q.enqueue(b"c")
        got = list(conn.notifies(timeout=5.0, stop_after=2)) + _received(conn, 0.2)
        assert len(got) == 2  # two statements in two transactions: two wakes


def test_q7_delayed_enqueue_notifies_too(qs: Any, engine: Engine) -> None:
    q = qs.queue("q7")
    with listening(engine, q.channel) as conn:
        q.enqueue(b"x", EnqueueOpts(delay=3600))
        assert len(_one_then_quiet(conn)) == 1


def test_q7_other_queues_do_not_wake_this_channel(qs: Any, engine: Engine) -> None:
    q = qs.queue("q7")
    other = qs.queue("q7-other")
    with listening(engine, q.channel) as conn:
        other.enqueue(b"x")
        other.enqueue_many([b"a", b"b"])
        assert _received(conn, 0.3) == []


def test_q7_a_rolled_back_enqueue_wakes_no_one(store: Store, engine: Engine) -> None:
    q = store.queue("q7")
    with listening(engine, q.channel) as listener:
        with engine.connect() as conn:
            q.enqueue(b"x", session=conn)
            q.enqueue_many([b"a", b"b"], session=conn)
            conn.rollback()
        with Session(engine) as session:
            q.enqueue(b"y", session=session)
            session.rollback()
        assert _received(listener, 0.3) == []
        with engine.connect() as conn:  # the control: the same, committed, wakes
            q.enqueue(b"x", session=conn)
            conn.commit()
        assert len(_one_then_quiet(listener)) == 1


async def test_q7_async_rolled_back_enqueue_wakes_no_one(
    async_engine: AsyncEngine, engine: Engine
) -> None:
    q = AsyncStore(async_engine).queue("q7")
    with listening(engine, q.channel) as listener:
        async with async_engine.connect() as conn:
            await q.enqueue(b"x", session=conn)
            await conn.rollback()
        assert _received(listener, 0.3) == []
        async with AsyncOrmSession(async_engine) as session:
            await q.enqueue(b"x", session=session)
            await session.commit()
        assert len(_one_then_quiet(listener)) == 1


def test_q7_channel_is_per_schema_and_queue_and_fits_63_bytes(engine: Engine) -> None:
    a, b = Store(engine), Store(engine, schema="other_schema")
    assert a.queue("x").channel != b.queue("x").channel
    names = ["x", "a" * 63, "a" * 62 + "b", "é" * 31 + "a", "🙂" * 15 + "abc"]
    channels = {(s.schema, n): s.queue(n).channel for s in (a, b) for n in names}
    assert len(set(channels.values())) == len(channels)  # no two share a channel
    assert all(len(c.encode()) <= 63 for c in channels.values())


def test_q7_long_name_channel_can_be_listened_on(qs: Any, engine: Engine) -> None:
    q = qs.queue("🙂" * 15 + "abc")
    with listening(engine, q.channel) as conn:
        q.enqueue(b"x")
        assert [n.channel for n in _one_then_quiet(conn)] == [q.channel]


def test_q7_enqueue_many_is_one_statement_for_the_whole_batch(qs: Any) -> None:
    q = qs.queue("q7")
    q.get_job(0)  # warm the pool: the first connect runs the dialect's own queries
    spy = SqlSpy(sync_engine_of(qs))
    try:
        ids = q.enqueue_many([b"%d" % i for i in range(500)])
        assert len(ids) == 500
        assert spy.count == 1, spy.statements
        assert "pg_notify" in spy.statements[0][0]
    finally:
        spy.close()
