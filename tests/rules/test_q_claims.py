"""Q8-Q13: exactly-once claims, claim order, claimability, lapses, n <= 0."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text

from alkstore_sa import EnqueueOpts, QueueOpts

from .._qtools import db_now, dead_row, expire, lapse, live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of

# -- Q8 ------------------------------------------------------------------------


def test_q8_two_threads_racing_for_one_row_get_one_handle(qs: Any) -> None:
    q = qs.queue("race")
    rounds = 200
    barrier = threading.Barrier(2)

    def contender(worker: str) -> Any:
        barrier.wait()
        return q.claim_one(worker)

    with ThreadPoolExecutor(2) as pool:
        for round_no in range(rounds):
            job_id = q.enqueue(b"%d" % round_no)
            a, b = pool.submit(contender, "a"), pool.submit(contender, "b")
            got = [h for h in (a.result(), b.result()) if h is not None]
            assert [h.id for h in got] == [job_id], f"round {round_no}"
            assert got[0].job.attempts == 1


def test_q8_six_workers_by_forty_concurrent_claims_never_double_claim(
    qs: Any, engine: Engine
) -> None:
    workers, claims = 6, 40
    q = qs.queue("drain")
    enqueued = q.enqueue_many([b"%d" % i for i in range(workers * claims)])
    barrier = threading.Barrier(workers)

    def worker(n: int) -> list[tuple[int, str]]:
        barrier.wait()
        out = []
        for _ in range(claims):
            handle = q.claim_one(f"w{n}")
            if handle is not None:
                out.append((handle.id, handle.job.worker_id))
        return out

    with ThreadPoolExecutor(workers) as pool:
        results = [f.result() for f in [pool.submit(worker, n) for n in range(workers)]]
    claimed = [job_id for result in results for job_id, _ in result]
    doubles = [i for i, c in Counter(claimed).items() if c > 1]
    assert doubles == []
    # Every claim found a job while unclaimed rows remained: the queue is drained.
    assert sorted(claimed) == sorted(enqueued)
    rows = sql(engine, "SELECT id, attempts, worker_id, status FROM alkstore.jobs")
    assert all(r["attempts"] == 1 and r["status"] == "processing" for r in rows)
    holder = {job_id: who for result in results for job_id, who in result}
    assert all(holder[r["id"]] == r["worker_id"] for r in rows)


def test_q8_concurrent_batch_claims_never_double_claim(qs: Any) -> None:
    q = qs.queue("drain")
    enqueued = q.enqueue_many([b"x"] * 300)
    barrier = threading.Barrier(4)

    def worker(n: int) -> list[int]:
        barrier.wait()
        out: list[int] = []
        while batch := q.claim_batch(f"w{n}", 7):
            out += [h.id for h in batch]
        return out

    with ThreadPoolExecutor(4) as pool:
        claimed = [i for f in [pool.submit(worker, n) for n in range(4)] for i in f.result()]
    assert sorted(claimed) == sorted(enqueued)


@contextmanager
def locked(engine: Engine, *job_ids: int) -> Iterator[Connection]:
    """Hold row locks on these jobs in an open transaction of another session."""
    with engine.connect() as conn:
        conn.execute(
            text("SELECT id FROM alkstore.jobs WHERE id = ANY(:ids) FOR UPDATE"),
            {"ids": list(job_ids)},
        )
        try:
            yield conn
        finally:
            conn.rollback()


def _claim_without_waiting(q: Any, worker: str, n: int = 1) -> list[Any]:
    # In a thread: a claim that waited for the lock would hang this test, not fail it.
    with ThreadPoolExecutor(1) as pool:
        return list(pool.submit(q.claim_batch, worker, n).result(timeout=5))


def test_q8_a_claim_skips_a_locked_row_and_returns_another(qs: Any, engine: Engine) -> None:
    q = qs.queue("locks")
    first, second, third = q.enqueue_many([b"1", b"2", b"3"])
    with locked(engine, first):
        got = _claim_without_waiting(q, "w")
        assert [h.id for h in got] == [second]
        got = _claim_without_waiting(q, "w", 5)
        assert [h.id for h in got] == [third]
    assert q.get_job(first).status == "pending"


def test_q8_a_claim_skips_a_locked_lapsed_row_and_returns_a_pending_one(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("locks")
    lapsed_id = q.enqueue(b"old", EnqueueOpts(priority=9))
    assert q.claim_one("gone").id == lapsed_id
    lapse(engine, lapsed_id)
    pending_id = q.enqueue(b"new")
    with locked(engine, lapsed_id):
        got = _claim_without_waiting(q, "w")
        assert [h.id for h in got] == [pending_id]


def test_q8_when_every_row_is_locked_a_claim_returns_empty_at_once(qs: Any, engine: Engine) -> None:
    q = qs.queue("locks")
    ids = q.enqueue_many([b"1", b"2"])
    with locked(engine, *ids):
        assert _claim_without_waiting(q, "w", 10) == []
    assert len(q.claim_batch("w", 10)) == 2  # the locks are gone: both claimable


# -- Q9 ------------------------------------------------------------------------


def _at(year: int) -> EnqueueOpts:
    return EnqueueOpts(run_at=datetime(year, 1, 1, tzinfo=UTC))


def _order_fixture(q: Any) -> list[int]:
    """Enqueue a mix and return the ids in the order Q9 says they are claimed."""
    a = q.enqueue(b"a", _at(2000))  # prio 0, old
    b = q.enqueue(b"b", EnqueueOpts(priority=5))  # prio 5, now
    c = q.enqueue(b"c", EnqueueOpts(priority=5, run_at=datetime(1999, 1, 1, tzinfo=UTC)))
    d = q.enqueue(b"d")  # prio 0, now
    e = q.enqueue(b"e", EnqueueOpts(priority=-1, run_at=datetime(1990, 1, 1, tzinfo=UTC)))
    f = q.enqueue_many([b"f1", b"f2", b"f3"], EnqueueOpts(priority=5))  # same run_at
    g = q.enqueue(b"g", _at(2000))  # ties a on priority and run_at: after a
    return [c, b, *f, a, g, d, e]


def test_q9_claim_one_order_is_priority_run_at_then_enqueue_order(qs: Any) -> None:
    q = qs.queue("order")
    expected = _order_fixture(q)
    got = []
    while (handle := q.claim_one("w")) is not None:
        got.append(handle.id)
    assert got == expected


def test_q9_claim_batch_takes_the_first_n_in_order_and_returns_them_in_order(
    qs: Any,
) -> None:
    q = qs.queue("order")
    expected = _order_fixture(q)
    first = q.claim_batch("w", 4)
    rest = q.claim_batch("w", 100)
    assert [h.id for h in first] == expected[:4]
    assert [h.id for h in rest] == expected[4:]


def test_q9_a_lapsed_row_is_reclaimed_in_the_same_order(qs: Any, engine: Engine) -> None:
    q = qs.queue("order")
    high = q.enqueue(b"high", EnqueueOpts(priority=9))
    assert q.claim_one("gone").id == high
    low = q.enqueue(b"low")
    older_low = q.enqueue(b"older", _at(2000))
    lapse(engine, high)
    assert [h.id for h in q.claim_batch("w", 3)] == [high, older_low, low]


# -- Q10 -----------------------------------------------------------------------


def test_q10_future_run_at_is_not_claimable_until_due(qs: Any, engine: Engine) -> None:
    q = qs.queue("due")
    later = q.enqueue(b"x", EnqueueOpts(delay=60))
    future = q.enqueue(b"y", EnqueueOpts(run_at=datetime(2100, 1, 1, tzinfo=UTC)))
    assert q.claim_batch("w", 10) == []
    sql(
        engine,
        "UPDATE alkstore.jobs SET run_at = clock_timestamp() - interval '1 ms' WHERE id = :id",
        id=later,
    )
    assert [h.id for h in q.claim_batch("w", 10)] == [later]
    assert q.get_job(future).status == "pending"


def test_q10_expired_rows_are_not_claimable(qs: Any, engine: Engine) -> None:
    q = qs.queue("exp")
    held = q.enqueue(b"h", EnqueueOpts(expires_in=3600))
    assert q.claim_one("w").id == held
    pending = q.enqueue(b"p", EnqueueOpts(expires_in=3600))
    lapse(engine, held)  # lapsed with attempts left: reclaimable, were it not expired
    expire(engine, pending, held)
    assert q.claim_batch("w2", 10) == []
    assert q.get_job(pending).status == "pending"  # not buried either, until a sweep
    assert q.get_job(held).status == "processing"


def test_q10_other_queues_rows_are_not_claimable(qs: Any, engine: Engine) -> None:
    mine, other = qs.queue("mine"), qs.queue("other")
    other_lapsed = other.enqueue(b"y")
    assert other.claim_one("o").id == other_lapsed
    lapse(engine, other_lapsed)
    theirs = other.enqueue(b"x")
    assert mine.claim_batch("w", 10) == []
    assert other.get_job(theirs).status == "pending"
    assert sorted(h.id for h in other.claim_batch("o", 10)) == [other_lapsed, theirs]


def test_q10_dead_rows_are_not_claimable(qs: Any) -> None:
    q = qs.queue("dead")
    q.enqueue(b"x")
    assert q.claim_one("w").fail("no") is True
    assert q.claim_batch("w", 10) == []


# -- Q11 -----------------------------------------------------------------------


def test_q11_claim_sets_status_attempts_worker_and_deadline(qs: Any, engine: Engine) -> None:
    q = qs.queue("c", QueueOpts(visibility_timeout=45))
    job_id = q.enqueue(b"x")
    before = db_now(engine)
    handle = q.claim_one("worker-1")
    after = db_now(engine)
    job = handle.job
    assert (job.status, job.attempts, job.worker_id) == ("processing", 1, "worker-1")
    vt = timedelta(seconds=45)
    assert before + vt <= job.claim_deadline <= after + vt
    row = live_row(engine, job_id)
    assert row is not None
    assert (row["status"], row["attempts"], row["worker_id"]) == ("processing", 1, "worker-1")
    assert row["claim_deadline"] == job.claim_deadline


def test_q11_deadline_uses_the_jobs_own_visibility_timeout(qs: Any, engine: Engine) -> None:
    short = qs.queue("vt", QueueOpts(visibility_timeout=5))
    long = qs.queue("vt", QueueOpts(visibility_timeout=500))
    s_id = short.enqueue(b"s")
    l_id = long.enqueue(b"l")
    before = db_now(engine)
    handles = {h.id: h.job for h in long.claim_batch("w", 2)}  # via the 500 s handle
    after = db_now(engine)
    assert before + timedelta(seconds=5) <= handles[s_id].claim_deadline
    assert handles[s_id].claim_deadline <= after + timedelta(seconds=5)
    assert before + timedelta(seconds=500) <= handles[l_id].claim_deadline
    assert handles[l_id].claim_deadline <= after + timedelta(seconds=500)


def test_q11_a_reclaim_after_a_lapse_consumes_an_attempt(qs: Any, engine: Engine) -> None:
    q = qs.queue("c", QueueOpts(visibility_timeout=20, max_attempts=3))
    job_id = q.enqueue(b"x")
    first = q.claim_one("w1")
    lapse(engine, job_id)
    before = db_now(engine)
    second = q.claim_one("w2")
    assert second is not None and second.id == job_id
    assert (second.job.attempts, second.job.worker_id) == (2, "w2")
    assert second.job.claim_deadline >= before + timedelta(seconds=20)
    assert first.job.attempts == 1  # the old handle's snapshot is unchanged


# -- Q12 -----------------------------------------------------------------------


def test_q12_lapsed_exhausted_row_dead_letters_on_the_next_claim(qs: Any, engine: Engine) -> None:
    q = qs.queue("q12", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"payload\x00")
    first = q.claim_one("dies")
    assert first.job.attempts == 1
    lapse(engine, job_id)
    assert q.claim_one("other") is None  # buried, not handed out again
    assert live_row(engine, job_id) is None
    job = q.get_job(job_id)
    assert job is not None and job.status == "dead"
    assert job.last_error == "max attempts exceeded"
    assert (job.attempts, job.payload, job.worker_id) == (1, b"payload\x00", "dies")
    assert job.died_at is not None


def test_q12_a_claim_buries_while_it_hands_out_other_work(qs: Any, engine: Engine) -> None:
    q = qs.queue("q12", QueueOpts(max_attempts=1))
    stale = q.enqueue(b"stale")
    q.claim_one("dies")
    lapse(engine, stale)
    fresh = q.enqueue(b"fresh")
    assert [h.id for h in q.claim_batch("w", 5)] == [fresh]
    assert dead_row(engine, stale)["last_error"] == "max attempts exceeded"


def test_q12_worker_dying_on_every_attempt_ends_dead_not_stranded(qs: Any, engine: Engine) -> None:
    q = qs.queue("q12", QueueOpts(max_attempts=2))
    job_id = q.enqueue(b"x")
    for attempt in (1, 2):
        handle = q.claim_one(f"w{attempt}")
        assert handle is not None and handle.job.attempts == attempt
        lapse(engine, job_id)
    assert q.claim_one("w3") is None
    job = q.get_job(job_id)
    assert job is not None and job.status == "dead" and job.attempts == 2
    assert job.last_error == "max attempts exceeded"


def test_q12_unlapsed_or_other_queue_rows_are_left_alone(qs: Any, engine: Engine) -> None:
    q = qs.queue("q12", QueueOpts(max_attempts=1))
    other = qs.queue("q12-other", QueueOpts(max_attempts=1))
    held = q.enqueue(b"held")
    q.claim_one("w")  # exhausted but not lapsed
    theirs = other.enqueue(b"theirs")
    other.claim_one("w")
    lapse(engine, theirs)  # lapsed and exhausted, but in another queue
    assert q.claim_one("w") is None
    assert live_row(engine, held)["status"] == "processing"
    assert live_row(engine, theirs)["status"] == "processing"


def test_q12_sweep_expired_makes_the_same_move(qs: Any, engine: Engine) -> None:
    q = qs.queue("q12", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    q.claim_one("dies")
    lapse(engine, job_id)
    result = q.sweep_expired()
    # Chosen reading: SweepResult.expired counts deaths by expiry only (docs/design.md).
    assert (result.expired, result.purged) == (0, 0)
    job = q.get_job(job_id)
    assert job is not None and job.status == "dead"
    assert job.last_error == "max attempts exceeded"


# -- Q13 -----------------------------------------------------------------------


def test_q13_claim_batch_with_n_at_most_zero_returns_empty_and_runs_no_sql(qs: Any) -> None:
    q = qs.queue("q13")
    job_id = q.enqueue(b"x")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        with spy.no_sql():
            for n in (0, -1, -(2**31), -(2**70)):
                assert q.claim_batch("w", n) == []
        assert len(q.claim_batch("w", 1)) == 1  # the control: n=1 does run SQL
        assert spy.count >= 1
    finally:
        spy.close()
    assert q.get_job(job_id).attempts == 1


@pytest.mark.parametrize("n", [2**31, 2**63])
def test_q13_n_beyond_int4_is_a_value_error(qs: Any, n: int) -> None:
    with pytest.raises(ValueError):
        qs.queue("q13").claim_batch("w", n)


def test_q8_a_claim_is_one_round_trip(qs: Any, engine: Engine) -> None:
    q = qs.queue("one")
    ids = q.enqueue_many([b"a", b"b", b"c"])
    q.claim_one("w")
    lapse(engine, ids[0])  # a lapsed row to reclaim, and an exhausted one to bury
    sql(engine, "UPDATE alkstore.jobs SET max_attempts = 1 WHERE id = :id", id=ids[0])
    spy = SqlSpy(sync_engine_of(qs))
    try:
        handles = q.claim_batch("w", 5)
        assert spy.count == 1, spy.statements
    finally:
        spy.close()
    assert [h.id for h in handles] == ids[1:]
    assert q.get_job(ids[0]).status == "dead"


def test_q8_concurrent_reclaims_of_lapsed_rows_never_double_claim(qs: Any, engine: Engine) -> None:
    # Half the lapsed rows have attempts left (reclaimed once each), half have
    # none (buried once each); claimers race over all of them.
    q = qs.queue("lapsed")
    ids = q.enqueue_many([b"x"] * 120)
    assert len(q.claim_batch("first", 120)) == 120
    exhausted = ids[::2]
    sql(engine, "UPDATE alkstore.jobs SET max_attempts = 1 WHERE id = ANY(:ids)", ids=exhausted)
    lapse(engine, *ids)
    barrier = threading.Barrier(6)

    def worker(n: int) -> list[tuple[int, int]]:
        barrier.wait()
        out: list[tuple[int, int]] = []
        while batch := q.claim_batch(f"w{n}", 3):
            out += [(h.id, h.job.attempts) for h in batch]
        return out

    with ThreadPoolExecutor(6) as pool:
        got = [c for f in [pool.submit(worker, n) for n in range(6)] for c in f.result()]
    assert sorted(i for i, _ in got) == sorted(set(ids) - set(exhausted))
    assert all(attempts == 2 for _, attempts in got)
    dead = sql(engine, "SELECT id, last_error FROM alkstore.dead_jobs ORDER BY id")
    assert [r["id"] for r in dead] == sorted(exhausted)
    assert {r["last_error"] for r in dead} == {"max attempts exceeded"}
