"""O1-O3: list a queue's jobs, requeue dead letters, purge dead letters."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import AsyncSession as AsyncOrmSession
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, EnqueueOpts, QueueOpts, Store, StoreClosedError

from .._qtools import age_dead, db_now, dead_row, live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of
from .test_q_enqueue import listening


def _dead(q: Any, *payloads: bytes, error: str = "boom") -> list[int]:
    """Enqueue ``payloads`` and fail each: dead letters, in this order of dying."""
    ids = []
    for payload in payloads:
        job_id = q.enqueue(payload)
        handle = q.claim_one("w")
        assert handle is not None and handle.id == job_id
        assert handle.fail(error) is True
        ids.append(job_id)
    return ids


def _no_sql(qs: Any) -> SqlSpy:
    return SqlSpy(sync_engine_of(qs))


# -- O1 --------------------------------------------------------------------------


def test_o1_jobs_lists_live_and_dead_rows_newest_first(qs: Any, engine: Engine) -> None:
    q = qs.queue("o1")
    other = qs.queue("o1-other")
    [dead] = _dead(q, b"dead")
    pending, held = q.enqueue_many([b"pending", b"held"])
    handle = q.claim_one("w")
    assert handle.id == pending  # claim order: the older one
    later = q.enqueue(b"later", EnqueueOpts(delay=3600))
    _dead(other, b"not mine")
    other.enqueue(b"not mine either")

    listed = q.jobs()
    assert [j.id for j in listed] == [later, held, pending, dead]
    by_id = {j.id: j for j in listed}
    assert [by_id[i].status for i in (later, held, pending, dead)] == [
        "pending",
        "pending",
        "processing",
        "dead",
    ]
    # The same rows get_job reads (Q24), resolved values and all.
    for job in listed:
        assert job == q.get_job(job.id)
    assert by_id[dead].last_error == "boom" and by_id[dead].died_at is not None
    assert by_id[pending].worker_id == "w" and by_id[pending].died_at is None


@pytest.mark.parametrize("status", ["pending", "processing", "dead"])
def test_o1_status_narrows_to_one_kind(qs: Any, status: str) -> None:
    q = qs.queue("o1")
    _dead(q, b"d1", b"d2")
    q.enqueue_many([b"p1", b"p2", b"p3"])
    q.claim_batch("w", 1)
    listed = q.jobs(status)
    assert listed and {j.status for j in listed} == {status}
    assert len(listed) == {"pending": 2, "processing": 1, "dead": 2}[status]
    assert [j.id for j in listed] == sorted((j.id for j in listed), reverse=True)


def test_o1_before_continues_a_listing_by_id(qs: Any) -> None:
    q = qs.queue("o1")
    dead = _dead(q, b"a", b"b", b"c")
    live = q.enqueue_many([b"%d" % i for i in range(6)])
    q.claim_batch("w", 2)
    everything = sorted(dead + live, reverse=True)
    pages: list[list[int]] = []
    before = None
    while True:
        page = q.jobs(limit=4, before=before)
        if not page:
            break
        pages.append([j.id for j in page])
        before = page[-1].id
    assert [len(p) for p in pages] == [4, 4, 1]
    assert [i for p in pages for i in p] == everything
    assert [j.id for j in q.jobs("dead", limit=2, before=dead[2])] == [dead[1], dead[0]]
    assert q.jobs(before=min(everything)) == []


def test_o1_limit_bounds_the_listing(qs: Any) -> None:
    q = qs.queue("o1")
    ids = q.enqueue_many([b"x"] * 5)
    assert [j.id for j in q.jobs(limit=1)] == [ids[-1]]
    assert len(q.jobs(limit=1000)) == 5


def test_o1_jobs_is_a_pure_read(qs: Any, engine: Engine) -> None:
    q = qs.queue("o1")
    _dead(q, b"d")
    q.enqueue_many([b"a", b"b"])
    q.claim_one("w")
    before = (
        sql(engine, "SELECT * FROM alkstore.jobs ORDER BY id"),
        sql(engine, "SELECT * FROM alkstore.dead_jobs ORDER BY id"),
    )
    q.jobs()
    q.jobs("processing", limit=1)
    after = (
        sql(engine, "SELECT * FROM alkstore.jobs ORDER BY id"),
        sql(engine, "SELECT * FROM alkstore.dead_jobs ORDER BY id"),
    )
    assert before == after


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"limit": 0}, ValueError),
        ({"limit": 1001}, ValueError),
        ({"limit": -5}, ValueError),
        ({"limit": "10"}, TypeError),
        ({"limit": True}, TypeError),
        ({"limit": 2.0}, TypeError),
        ({"status": "done"}, ValueError),
        ({"status": "Pending"}, ValueError),
        ({"status": ""}, ValueError),
        ({"status": 1}, TypeError),
        ({"before": "5"}, TypeError),
        ({"before": 2**63}, ValueError),
    ],
)
def test_o1_bad_arguments_raise_before_any_sql(qs: Any, kwargs: Any, error: type) -> None:
    q = qs.queue("o1")
    spy = _no_sql(qs)
    try:
        with spy.no_sql(), pytest.raises(error):
            q.jobs(**kwargs)
    finally:
        spy.close()


# -- O2 --------------------------------------------------------------------------


def test_o2_requeue_keeps_id_and_the_jobs_own_values(qs: Any, engine: Engine) -> None:
    opts = QueueOpts(priority=7, max_attempts=3, visibility_timeout=12.5)
    q = qs.queue("o2", opts)
    job_id = q.enqueue(b"\x00payload", EnqueueOpts(expires_in=3600, priority=9))
    handle = q.claim_one("w")
    assert handle.fail("it broke") is True
    dead = dead_row(engine, job_id)
    started = db_now(engine)

    assert q.requeue_dead() == 1

    assert dead_row(engine, job_id) is None
    row = live_row(engine, job_id)
    for kept in ("queue", "payload", "priority", "max_attempts", "visibility_timeout"):
        assert row[kept] == dead[kept], kept
    assert row["created_at"] == dead["created_at"]
    assert row["last_error"] == "it broke"
    assert row["status"] == "pending" and row["attempts"] == 0
    assert row["run_at"] >= started  # due now, by the database's clock
    assert row["expires_at"] is None and row["worker_id"] is None
    assert row["claim_deadline"] is None
    job = q.get_job(job_id)
    assert job.status == "pending" and job.died_at is None and job.priority == 9

    # A requeued job then lives and dies like any other.
    again = q.claim_one("w2")
    assert again.id == job_id and again.job.attempts == 1 and again.payload == b"\x00payload"
    assert again.retry("second", delay=0) is True
    third = q.claim_one("w3")
    assert third.id == job_id and third.job.attempts == 2
    assert third.fail() is True
    assert q.get_job(job_id).status == "dead"


def test_o2_without_ids_moves_the_oldest_dead_first(qs: Any, engine: Engine) -> None:
    q = qs.queue("o2")
    a, b, c, d = _dead(q, b"a", b"b", b"c", b"d")
    age_dead(engine, c, 300)  # the oldest death, though not the oldest id
    age_dead(engine, a, 200)
    sql(  # b and d died at the same instant: then by id
        engine,
        "UPDATE alkstore.dead_jobs SET died_at = clock_timestamp() - interval '100 s' "
        "WHERE id IN (:b, :d)",
        b=b,
        d=d,
    )
    assert q.requeue_dead(limit=2) == 2
    assert {j.id for j in q.jobs("pending")} == {c, a}
    assert q.requeue_dead(limit=1) == 1
    assert {j.id for j in q.jobs("pending")} == {c, a, b}
    assert q.requeue_dead() == 1
    assert q.requeue_dead() == 0
    assert q.jobs("dead") == []


def test_o2_given_ids_that_are_not_dead_rows_of_this_queue_are_skipped(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("o2")
    other = qs.queue("o2-other")
    mine = _dead(q, b"x", b"y", b"z")
    [theirs] = _dead(other, b"theirs")
    pending = q.enqueue(b"pending")
    unknown = 10**12
    assert q.requeue_dead([mine[0], theirs, pending, unknown, mine[2], mine[2]]) == 2
    assert live_row(engine, mine[0])["status"] == "pending"
    assert live_row(engine, mine[2])["status"] == "pending"
    assert dead_row(engine, mine[1]) is not None
    assert dead_row(engine, theirs) is not None
    assert live_row(engine, pending)["attempts"] == 0
    assert q.requeue_dead([mine[0]]) == 0  # no longer dead


def test_o2_limit_caps_a_call_with_ids_too(qs: Any, engine: Engine) -> None:
    q = qs.queue("o2")
    ids = _dead(q, b"a", b"b", b"c")
    age_dead(engine, ids[2], 60)
    assert q.requeue_dead(ids, limit=1) == 1
    assert live_row(engine, ids[2]) is not None  # the oldest death of those given


def test_o2_notifies_the_wake_channel_once_when_it_moved_any(qs: Any, engine: Engine) -> None:
    q = qs.queue("o2")
    _dead(q, b"a", b"b", b"c")
    with listening(engine, q.channel) as conn:
        assert q.requeue_dead() == 3
        got = list(conn.notifies(timeout=5.0, stop_after=1))
        got += list(conn.notifies(timeout=0.3))
        assert [(n.channel, n.payload) for n in got] == [(q.channel, "")]
        assert q.requeue_dead() == 0
        assert q.requeue_dead([10**12]) == 0
        assert list(conn.notifies(timeout=0.5)) == []


def test_o2_concurrent_requeues_move_each_row_once(qs: Any, engine: Engine) -> None:
    q = qs.queue("o2")
    total = 60
    ids = q.enqueue_many([b"%d" % i for i in range(total)])
    for handle in q.claim_batch("w", total):
        assert handle.fail("x") is True
    barrier = threading.Barrier(4)

    def requeue() -> int:
        barrier.wait()
        moved = 0
        while True:
            n = q.requeue_dead(limit=7)
            if n == 0 and not q.jobs("dead", limit=1):
                return moved
            moved += n

    with ThreadPoolExecutor(4) as pool:
        counts = [f.result() for f in [pool.submit(requeue) for _ in range(4)]]
    assert sum(counts) == total
    rows = sql(engine, "SELECT id, attempts FROM alkstore.jobs ORDER BY id")
    assert [r["id"] for r in rows] == ids and all(r["attempts"] == 0 for r in rows)
    assert sql(engine, "SELECT count(*) AS n FROM alkstore.dead_jobs")[0]["n"] == 0


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_o2_session_requeue_follows_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("o2")
    [job_id] = _dead(q, b"x")
    with listening(engine, q.channel) as conn:
        with Session(engine) as session:
            assert q.requeue_dead([job_id], session=session) == 1
            assert dead_row(engine, job_id) is not None  # not visible outside yet
            getattr(session, outcome)()
        woke = list(conn.notifies(timeout=0.5))
    kept = outcome == "commit"
    assert (live_row(engine, job_id) is not None) is kept
    assert (dead_row(engine, job_id) is None) is kept
    assert len(woke) == (1 if kept else 0)  # sent at commit, never for a rollback


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_o2_async_session_requeue_follows_the_callers_transaction(
    async_engine: AsyncEngine, engine: Engine, outcome: str
) -> None:
    sync_q = Store(engine).queue("o2")
    [job_id] = _dead(sync_q, b"x")
    q = AsyncStore(async_engine).queue("o2")
    async with AsyncOrmSession(async_engine) as session:
        assert await q.requeue_dead([job_id], session=session) == 1
        await getattr(session, outcome)()
    assert (live_row(engine, job_id) is not None) is (outcome == "commit")


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((), {"limit": 0}, ValueError),
        ((), {"limit": 10_001}, ValueError),
        ((), {"limit": "5"}, TypeError),
        ((), {"limit": False}, TypeError),
        (("123",), {}, TypeError),
        ((b"12",), {}, TypeError),
        ((5,), {}, TypeError),
        (([1, "2"],), {}, TypeError),
        (([True],), {}, TypeError),
        (([2**63],), {}, ValueError),
        (([1],), {"limit": 0}, ValueError),
    ],
)
def test_o2_bad_arguments_raise_before_any_sql(
    qs: Any, args: Any, kwargs: Any, error: type
) -> None:
    q = qs.queue("o2")
    spy = _no_sql(qs)
    try:
        with spy.no_sql(), pytest.raises(error):
            q.requeue_dead(*args, **kwargs)
    finally:
        spy.close()


def test_o2_empty_ids_are_zero_without_sql(qs: Any) -> None:
    q = qs.queue("o2")
    spy = _no_sql(qs)
    try:
        with spy.no_sql():
            assert q.requeue_dead([]) == 0
            assert q.requeue_dead(iter(())) == 0
    finally:
        spy.close()


# -- O3 --------------------------------------------------------------------------


def test_o3_purge_without_ids_deletes_every_dead_row_of_this_queue(qs: Any, engine: Engine) -> None:
    q = qs.queue("o3")
    other = qs.queue("o3-other")
    mine = _dead(q, b"a", b"b")
    [theirs] = _dead(other, b"c")
    live = q.enqueue(b"live")
    assert q.purge_dead() == 2
    assert all(dead_row(engine, i) is None for i in mine)
    assert q.get_job(mine[0]) is None  # purged: gone for good (Q24)
    assert dead_row(engine, theirs) is not None and live_row(engine, live) is not None
    assert q.purge_dead() == 0


def test_o3_purge_of_given_ids_skips_the_others(qs: Any, engine: Engine) -> None:
    q = qs.queue("o3")
    other = qs.queue("o3-other")
    a, b = _dead(q, b"a", b"b")
    [theirs] = _dead(other, b"t")
    live = q.enqueue(b"live")
    assert q.purge_dead([a, theirs, live, 10**12, a]) == 1
    assert dead_row(engine, a) is None
    assert dead_row(engine, b) is not None and dead_row(engine, theirs) is not None
    assert live_row(engine, live) is not None


def test_o3_older_than_narrows_to_rows_dead_longer_than_that(qs: Any, engine: Engine) -> None:
    q = qs.queue("o3")
    old, older, fresh, old_kept = _dead(q, b"old", b"older", b"fresh", b"old-kept")
    for job_id, ago in ((old, 120), (older, 3600), (old_kept, 120)):
        age_dead(engine, job_id, ago)
    assert q.purge_dead([old, fresh], older_than=60) == 1  # ids and age together
    assert dead_row(engine, old) is None and dead_row(engine, fresh) is not None
    assert q.purge_dead(older_than=timedelta(minutes=30)) == 1
    assert dead_row(engine, older) is None and dead_row(engine, old_kept) is not None
    assert q.purge_dead(older_than=60) == 1
    assert q.jobs("dead") == [q.get_job(fresh)]
    assert q.purge_dead(older_than=0) == 1  # dead at all: every row (Q25's 0)
    assert q.jobs("dead") == []


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_o3_session_purge_follows_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("o3")
    ids = _dead(q, b"a", b"b")
    with engine.connect() as conn:
        assert q.purge_dead(session=conn) == 2
        assert q.purge_dead([ids[0]], session=conn) == 0  # already gone in this transaction
        getattr(conn, outcome)()
    assert all((dead_row(engine, i) is None) is (outcome == "commit") for i in ids)


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((), {"older_than": -1}, ValueError),
        ((), {"older_than": timedelta(seconds=-1)}, ValueError),
        ((), {"older_than": float("nan")}, ValueError),
        ((), {"older_than": "60"}, TypeError),
        ((), {"older_than": True}, TypeError),
        (("1",), {}, TypeError),
        (([1.0],), {}, TypeError),
        (([-(2**63) - 1],), {}, ValueError),
        (([1],), {"older_than": -0.5}, ValueError),
    ],
)
def test_o3_bad_arguments_raise_before_any_sql(
    qs: Any, args: Any, kwargs: Any, error: type
) -> None:
    q = qs.queue("o3")
    spy = _no_sql(qs)
    try:
        with spy.no_sql(), pytest.raises(error):
            q.purge_dead(*args, **kwargs)
    finally:
        spy.close()


def test_o3_empty_ids_are_zero_without_sql(qs: Any) -> None:
    q = qs.queue("o3")
    spy = _no_sql(qs)
    try:
        with spy.no_sql():
            assert q.purge_dead([]) == 0
            assert q.purge_dead([], older_than=5) == 0
    finally:
        spy.close()


# -- Q29 for the operations ---------------------------------------------------------


def test_q29_operations_on_a_closed_store_raise_without_sql(qs: Any) -> None:
    q = qs.queue("o-closed")
    spy = _no_sql(qs)
    qs.close()
    ops = [
        lambda: q.jobs(),
        lambda: q.requeue_dead(),
        lambda: q.requeue_dead([]),
        lambda: q.purge_dead(),
        lambda: q.purge_dead([]),
        lambda: q.pause(),
        lambda: q.resume(),
        lambda: q.stats(),
        lambda: qs.queue_names(),
        lambda: qs.stats(),
    ]
    try:
        with spy.no_sql():
            for op in ops:
                with pytest.raises(StoreClosedError):
                    op()
    finally:
        spy.close()


def test_o_engine_sees_no_stray_transactions(engine: Engine) -> None:
    """The store's own operations leave no transaction open on the pooled connection."""
    with Store(engine) as store:
        q = store.queue("o-tx")
        _dead(q, b"a")
        q.jobs()
        q.requeue_dead()
        q.pause()
        q.resume()
        q.stats()
        store.stats()
        with engine.connect() as conn:
            idle = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'idle in transaction'"
                )
            ).scalar()
        assert idle == 0
