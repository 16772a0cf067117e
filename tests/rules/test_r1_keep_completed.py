"""R1: ``keep_completed`` -- a stamped job is kept at its ack, with its result, for a TTL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from alkstore_sa import EnqueueOpts, QueueOpts, Store

from .._qtools import sql
from .._sqlspy import SqlSpy, sync_engine_of


def _completed_rows(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    return sql(engine, "SELECT * FROM alkstore.completed_jobs WHERE id = :id", id=job_id)


def test_r1_a_stamped_job_is_kept_with_its_result(qs: Any, engine: Engine) -> None:
    q = qs.queue("r1", QueueOpts(keep_completed=3600))
    job_id = q.enqueue(b"in")
    handle = q.claim_one("w")
    assert handle.job.keep_completed == 3600.0
    assert handle.ack(b"out") is True
    job = q.get_job(job_id)
    assert job.status == "completed"
    assert job.result == b"out" and job.payload == b"in"
    assert job.finished_at is not None and job.died_at is None
    assert job.attempts == 1
    assert sql(engine, "SELECT count(*) AS n FROM alkstore.jobs")[0]["n"] == 0
    [row] = _completed_rows(engine, job_id)
    assert row["keep_until"] - row["finished_at"] == timedelta(hours=1)


def test_r1_a_result_of_1_mib_round_trips(qs: Any) -> None:
    q = qs.queue("r1", QueueOpts(keep_completed=60))
    job_id = q.enqueue(b"")
    big = bytes(range(256)) * 4096  # 1 MiB, every byte value, NULs included
    assert q.claim_one("w").ack(result=big) is True
    assert q.get_job(job_id).result == big


def test_r1_enqueue_opts_stamp_overrides_the_queue(qs: Any, engine: Engine) -> None:
    q = qs.queue("r1")
    kept, plain = q.enqueue(b"k", EnqueueOpts(keep_completed=10)), q.enqueue(b"p")
    a, b = q.claim_batch("w", 2)
    assert {a.id, b.id} == {kept, plain}
    assert a.ack(b"r") and b.ack(b"ignored")
    assert q.get_job(kept).status == "completed"
    assert q.get_job(plain) is None  # no stamp: deleted, result ignored (Q16)
    assert _completed_rows(engine, plain) == []


def test_r1_without_the_stamp_the_ack_is_the_plain_delete(qs: Any) -> None:
    q = qs.queue("r1")
    q.enqueue(b"x")
    handle = q.claim_one("w")
    engine = sync_engine_of(qs)
    spy = SqlSpy(engine)
    try:
        assert handle.ack() is True
    finally:
        spy.close()
    [stmt] = [s for s, _ in spy.statements if "jobs" in s]
    assert stmt.lstrip().upper().startswith("DELETE FROM")
    assert "completed_jobs" not in stmt and "pg_notify" not in stmt


def test_r1_ack_batch_without_the_stamp_is_one_plain_delete(qs: Any) -> None:
    q = qs.queue("r1")
    q.enqueue_many([b"a", b"b", b"c"])
    handles = q.claim_batch("w", 3)
    spy = SqlSpy(sync_engine_of(qs))
    try:
        assert q.ack_batch([h.id for h in handles]) == 3
    finally:
        spy.close()
    [stmt] = [s for s, _ in spy.statements if "jobs" in s]
    assert stmt.lstrip().upper().startswith("DELETE FROM")
    assert "completed_jobs" not in stmt and "pg_notify" not in stmt


def test_r1_ack_batch_of_stamped_and_plain_jobs_acks_each_once(qs: Any, engine: Engine) -> None:
    q = qs.queue("r1")
    kept = q.enqueue(b"k", EnqueueOpts(keep_completed=60))
    plain = q.enqueue(b"p")
    handles = q.claim_batch("w", 2)
    assert q.ack_batch([h.id for h in handles] + [10**12]) == 2  # an unknown id: not counted
    assert q.get_job(kept).status == "completed"
    assert q.get_job(plain) is None and _completed_rows(engine, plain) == []


def test_r1_ack_batch_moves_stamped_jobs_without_a_result(qs: Any) -> None:
    q = qs.queue("r1", QueueOpts(keep_completed=60))
    ids = q.enqueue_many([b"a", b"b"])
    plain = q.enqueue(b"c", EnqueueOpts(keep_completed=None))
    handles = q.claim_batch("w", 3)
    assert q.ack_batch([h.id for h in handles]) == 3
    for job_id in [*ids, plain]:
        job = q.get_job(job_id)
        assert job.status == "completed" and job.result is None


def test_r1_jobs_and_stats_show_completed(qs: Any) -> None:
    q = qs.queue("r1", QueueOpts(keep_completed=60))
    done = q.enqueue(b"a")
    live = q.enqueue(b"b", EnqueueOpts(delay=60))
    assert q.claim_one("w").ack(b"r")
    assert [j.id for j in q.jobs(status="completed")] == [done]
    assert {j.id for j in q.jobs()} == {done, live}
    stats = q.stats()
    assert stats.completed == 1 and stats.scheduled == 1
    assert qs.stats()["r1"].completed == 1


def test_r1_sweep_deletes_kept_jobs_after_their_ttl(qs: Any, engine: Engine) -> None:
    q = qs.queue("r1", QueueOpts(keep_completed=3600))
    old, young = q.enqueue(b"old"), q.enqueue(b"young")
    for handle in q.claim_batch("w", 2):
        assert handle.ack(b"r")
    sql(
        engine,
        "UPDATE alkstore.completed_jobs SET keep_until = clock_timestamp() - interval '1 s'"
        " WHERE id = :id",
        id=old,
    )
    result = q.sweep_expired()
    assert result.completed == 1
    assert q.get_job(old) is None
    assert q.get_job(young).status == "completed"


def test_r1_keep_completed_is_validated_before_sql(qs: Any) -> None:
    with pytest.raises(ValueError):
        QueueOpts(keep_completed=0)
    with pytest.raises(ValueError):
        EnqueueOpts(keep_completed=-1)
    with pytest.raises(TypeError):
        QueueOpts(keep_completed="1h")  # type: ignore[arg-type]
    q = qs.queue("r1", QueueOpts(keep_completed=60))
    q.enqueue(b"x")
    handle = q.claim_one("w")
    with pytest.raises(TypeError):
        handle.ack("text")
    assert handle.ack(b"ok") is True  # the refused ack consumed nothing (Q20)


def test_r1_session_ack_keeps_the_job_in_the_callers_transaction(store: Store) -> None:
    q = store.queue("r1", QueueOpts(keep_completed=60))
    job_id = q.enqueue(b"x")
    handle = q.claim_one("w")
    assert handle is not None
    with Session(store.engine) as session:
        assert handle.ack(b"r", session=session) is True
        session.rollback()
    assert q.get_job(job_id).status == "processing"  # rolled back with the caller
    again = q.claim_batch("w", 1)
    assert again == []  # still held by the first claim
    with Session(store.engine) as session:
        second = q.get_job(job_id)
        assert second is not None
    handle2 = q.claim_one("w")
    assert handle2 is None
