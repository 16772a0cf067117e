"""O4: pause and resume, persisted per schema and queue, seen by every claim at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, Engine, create_engine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncWorker, QueueOpts, Store, Worker

from .._qtools import dead_row, lapse, live_row, sql
from .._workers import KINDS, handler, start_worker, wait_for
from .test_q_enqueue import listening


def test_o4_pause_is_true_once_and_claims_on_a_paused_queue_get_nothing(qs: Any) -> None:
    q = qs.queue("o4")
    ids = q.enqueue_many([b"a", b"b", b"c"])
    assert q.pause() is True
    assert q.pause() is False  # changed nothing
    assert q.claim_one("w") is None
    assert q.claim_batch("w", 10) == []
    assert q.stats().paused is True
    assert all(q.get_job(i).status == "pending" for i in ids)
    assert q.resume() is True
    assert q.resume() is False
    assert [h.id for h in q.claim_batch("w", 10)] == ids


def test_o4_a_pause_survives_a_new_store_and_engine(qs: Any, database_url: URL) -> None:
    q = qs.queue("o4")
    job_id = q.enqueue(b"x")
    assert q.pause() is True
    other_engine = create_engine(database_url)
    try:
        with Store(other_engine) as again:
            q2 = again.queue("o4", QueueOpts(priority=3))  # other options, same queue
            assert q2.claim_one("w") is None
            assert q2.pause() is False
            assert q2.resume() is True
    finally:
        other_engine.dispose()
    assert q.claim_one("w").id == job_id


def test_o4_a_pause_is_per_queue_name(qs: Any) -> None:
    paused, running = qs.queue("o4-paused"), qs.queue("o4-running")
    paused.enqueue(b"p")
    job_id = running.enqueue(b"r")
    assert paused.pause() is True
    assert running.claim_one("w").id == job_id
    assert running.stats().paused is False


def test_o4_pausing_an_unknown_queue_is_allowed(qs: Any) -> None:
    q = qs.queue("o4-nobody-here")
    assert q.pause() is True
    assert "o4-nobody-here" in qs.queue_names()
    assert q.stats().paused is True
    assert q.resume() is True
    assert "o4-nobody-here" not in qs.queue_names()


def test_o4_a_paused_claim_buries_nothing_but_sweep_expired_does(qs: Any, engine: Engine) -> None:
    q = qs.queue("o4", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    assert q.claim_one("w").id == job_id
    lapse(engine, job_id)
    assert q.pause() is True
    assert q.claim_one("w") is None
    row = live_row(engine, job_id)
    assert row is not None and row["status"] == "processing"  # Q12's move waits
    assert dead_row(engine, job_id) is None
    q.sweep_expired()
    assert live_row(engine, job_id) is None
    assert dead_row(engine, job_id)["last_error"] == "max attempts exceeded"


def test_o4_a_paused_claim_does_not_reclaim_a_lapsed_job(qs: Any, engine: Engine) -> None:
    q = qs.queue("o4")
    job_id = q.enqueue(b"x")
    first = q.claim_one("w")
    lapse(engine, job_id)
    assert q.pause() is True
    assert q.claim_one("w2") is None
    row = live_row(engine, job_id)
    assert row["worker_id"] == "w" and row["attempts"] == 1
    assert q.resume() is True
    again = q.claim_one("w2")
    assert again.id == job_id and again.job.attempts == 2
    assert first.ack() is False


def test_o4_every_other_operation_works_while_paused(qs: Any, engine: Engine) -> None:
    q = qs.queue("o4", QueueOpts(max_attempts=2))
    held = q.enqueue_many([b"ack", b"retry", b"fail", b"beat"])
    handles = q.claim_batch("w", 4)
    assert q.pause() is True
    ack, retry, fail, beat = handles
    # Running jobs finish.
    assert beat.heartbeat(60) is True
    assert ack.ack() is True
    assert retry.retry("later", delay=0) is True
    assert fail.fail("no") is True
    assert q.ack_batch([beat.id]) == 1
    # Enqueue, read, cancel, list, requeue, purge, sweep, stats.
    new = q.enqueue(b"new")
    assert q.get_job(new).status == "pending"
    assert {j.id for j in q.jobs("pending")} == {new, held[1]}
    assert q.requeue_dead([fail.id]) == 1
    assert q.cancel(fail.id) is True
    assert q.sweep_expired().expired == 0
    assert q.purge_dead() == 0
    stats = q.stats()
    assert stats.paused is True and stats.due == 2
    # Nothing is claimed until the resume.
    assert q.claim_batch("w", 10) == []
    assert q.resume() is True
    assert {h.id for h in q.claim_batch("w", 10)} == {new, held[1]}


def test_o4_resume_wakes_the_channel_only_when_it_lifted_a_pause(qs: Any, engine: Engine) -> None:
    q = qs.queue("o4")
    with listening(engine, q.channel) as conn:
        assert q.resume() is False  # nothing to lift: nobody woken
        assert q.pause() is True  # a pause wakes nobody either
        assert q.pause() is False
        assert list(conn.notifies(timeout=0.5)) == []
        assert q.resume() is True
        got = list(conn.notifies(timeout=5.0, stop_after=1)) + list(conn.notifies(timeout=0.3))
        assert [(n.channel, n.payload) for n in got] == [(q.channel, "")]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_o4_session_pause_and_resume_follow_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("o4")
    job_id = q.enqueue(b"x")
    with Session(engine) as session:
        assert q.pause(session=session) is True
        assert q.claim_one("w") is not None  # not paused outside the transaction yet
        getattr(session, outcome)()
    q.cancel(job_id)
    q.enqueue(b"y")
    assert (q.claim_one("w") is None) is (outcome == "commit")
    if outcome == "commit":
        with listening(engine, q.channel) as conn:
            with engine.connect() as c:
                assert q.resume(session=c) is True
                assert list(conn.notifies(timeout=0.3)) == []  # sent at commit only
                c.commit()
            assert len(list(conn.notifies(timeout=5.0, stop_after=1))) == 1


def test_o4_a_claim_that_starts_after_pause_returned_gets_nothing(qs: Any) -> None:
    """Claims race a pause: every claim started after pause() returned is empty."""
    q = qs.queue("o4-race")
    q.enqueue_many([b"%d" % i for i in range(400)])
    results: list[tuple[float, bool]] = []
    stop = threading.Event()

    def claimer() -> None:
        while not stop.is_set():
            started = time.monotonic()
            got = q.claim_batch("w", 1)
            results.append((started, bool(got)))

    threads = [threading.Thread(target=claimer) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sum(ok for _, ok in results) >= 10)
        assert q.pause() is True
        paused_at = time.monotonic()
        wait_for(lambda: sum(started > paused_at for started, _ in results) >= 30)
    finally:
        stop.set()
        for t in threads:
            t.join()
    after = [ok for started, ok in results if started > paused_at]
    assert after and not any(after)


def test_o4_pause_is_per_schema(engine: Engine, blank_database: URL) -> None:
    from alembic import command

    from alkstore_sa.migrations._config import alembic_config

    for schema in ("a", "b"):
        command.upgrade(alembic_config(url=blank_database, schema=schema), "head")
    eng = create_engine(blank_database)
    try:
        with Store(eng, schema="a") as sa, Store(eng, schema="b") as sb:
            qa, qb = sa.queue("emails"), sb.queue("emails")
            qa.enqueue(b"a")
            job_b = qb.enqueue(b"b")
            assert qa.pause() is True
            assert qa.claim_one("w") is None
            assert qb.claim_one("w").id == job_b
            assert sb.queue_names() == ["emails"] and sb.stats()["emails"].paused is False
    finally:
        eng.dispose()


@pytest.mark.parametrize("kind", KINDS)
def test_o4_a_worker_idles_while_paused_and_resume_wakes_it_at_once(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("o4-worker")
    assert q.pause() is True
    ids = q.enqueue_many([b"a", b"b"])
    done: list[int] = []

    def build(s: Any) -> Worker | AsyncWorker:
        cls = Worker if kind == "sync" else AsyncWorker
        # No re-poll within the test: only the resume's wake can bring the jobs in.
        return cls(
            {s.queue("o4-worker"): handler(kind, lambda job: done.append(job.id))},
            poll_interval=60,
            handle_signals=False,
        )

    running = start_worker(kind, database_url, build)
    try:
        # The worker's first claim (right after LISTEN) has come and gone empty.
        wait_for(lambda: _listening(store.engine), timeout=10)
        time.sleep(0.3)
        assert done == []
        resumed = time.monotonic()
        assert q.resume() is True
        wait_for(lambda: len(done) == 2, timeout=10)
        assert time.monotonic() - resumed < 5  # the wake, not the 60 s re-poll
    finally:
        running.stop()
    assert sorted(done) == ids and all(q.get_job(i) is None for i in ids)


def _listening(engine: Engine) -> bool:
    rows = sql(
        engine,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN %'",
    )
    return bool(rows[0]["n"])


@pytest.mark.parametrize("kind", KINDS)
def test_o4_a_worker_paused_mid_drain_stops_claiming_and_resumes(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("o4-drain")
    ids = q.enqueue_many([b""] * 60)
    done: list[int] = []
    lock = threading.Lock()
    pause_at = threading.Event()

    def work(job: Any) -> None:
        time.sleep(0.01)
        with lock:
            done.append(job.id)
            if len(done) == 10:
                pause_at.set()

    running = start_worker(
        kind,
        database_url,
        lambda s: (Worker if kind == "sync" else AsyncWorker)(
            {s.queue("o4-drain"): handler(kind, work)}, concurrency=2, poll_interval=60
        ),
    )
    try:
        assert pause_at.wait(10)
        assert q.pause() is True
        # What was claimed before the pause finishes (at most the 2 slots);
        # after that nothing moves.
        time.sleep(0.3)
        with lock:
            settled = len(done)
        time.sleep(0.3)
        with lock:
            assert len(done) == settled < len(ids)
        assert q.resume() is True
        wait_for(lambda: len(done) == len(ids), timeout=20)
    finally:
        running.stop()
    assert sorted(done) == ids
