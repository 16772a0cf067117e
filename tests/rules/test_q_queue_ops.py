"""Q22-Q25: ack_batch, cancel, get_job, sweep_expired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, QueueOpts, SweepResult

from .._qtools import age_dead, dead_row, expire, lapse, live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of


def _all_rows(engine: Engine) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    live = sql(engine, "SELECT * FROM alkstore.jobs ORDER BY id")
    dead = sql(engine, "SELECT * FROM alkstore.dead_jobs ORDER BY id")
    return live, dead


# -- Q22 -----------------------------------------------------------------------


def test_q22_mixed_ack_batch_acks_only_held_claims(qs: Any, engine: Engine) -> None:
    q = qs.queue("q22")
    other = qs.queue("q22-other")
    q.enqueue_many([b"v1", b"v2", b"lapsed", b"dead"])
    valid1, valid2, lapsed, dead = q.claim_batch("w", 4)
    lapse(engine, lapsed.id)
    assert dead.fail("x") is True
    pending = q.enqueue(b"pending")
    theirs = other.enqueue(b"theirs")
    assert other.claim_one("w").id == theirs
    unknown = 10**12
    batch = [valid1.id, lapsed.id, pending, unknown, theirs, dead.id, valid2.id, valid1.id]
    assert q.ack_batch(batch) == 2
    assert live_row(engine, valid1.id) is None and live_row(engine, valid2.id) is None
    assert dead_row(engine, valid1.id) is None  # acked: gone, not dead
    assert live_row(engine, lapsed.id)["status"] == "processing"
    assert live_row(engine, pending)["status"] == "pending"
    assert live_row(engine, theirs)["status"] == "processing"
    assert dead_row(engine, dead.id)["last_error"] == "x"
    assert q.ack_batch([valid1.id, valid2.id]) == 0


def test_q22_ack_batch_skips_dead_rows_and_ignores_the_worker(qs: Any, engine: Engine) -> None:
    q = qs.queue("q22")
    q.enqueue_many([b"a", b"b", b"c"])
    mine, yours = q.claim_batch("me", 2)
    theirs = q.claim_one("someone-else")
    assert theirs.fail("x") is True
    assert q.ack_batch([mine.id, yours.id, theirs.id]) == 2
    assert q.get_job(theirs.id).status == "dead"
    assert mine.ack() is False  # the batch ack took the claim away


def test_q22_ack_batch_reaches_a_reclaimed_job_by_id_alone(qs: Any, engine: Engine) -> None:
    # Without attempts, the predicate is "processing and unlapsed" (no worker filter).
    q = qs.queue("q22")
    q.enqueue(b"x")
    old = q.claim_one("w")
    lapse(engine, old.id)
    new = q.claim_one("w")
    assert q.ack_batch([old.id]) == 1
    assert new.ack() is False


def test_q22_empty_ack_batch_is_zero_without_sql(qs: Any) -> None:
    q = qs.queue("q22")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        with spy.no_sql():
            assert q.ack_batch([]) == 0
            assert q.ack_batch(iter(())) == 0
    finally:
        spy.close()


# -- Q23 -----------------------------------------------------------------------


def test_q23_cancel_deletes_a_pending_or_processing_row(qs: Any, engine: Engine) -> None:
    q = qs.queue("q23")
    held_id, pending_id, later_id = q.enqueue_many([b"h", b"p", b"l"])
    handle = q.claim_one("w")
    assert handle.id == held_id
    sql(
        engine,
        "UPDATE alkstore.jobs SET run_at = run_at + interval '1 day' WHERE id = :id",
        id=later_id,
    )
    for job_id in (held_id, pending_id, later_id):
        assert q.cancel(job_id) is True
        assert live_row(engine, job_id) is None and dead_row(engine, job_id) is None
        assert q.cancel(job_id) is False  # the second time there is no such row
    assert handle.heartbeat(5) is False  # no interrupt, but the claim is gone
    assert handle.ack() is False


def test_q23_cancel_is_false_for_dead_unknown_and_other_queue_rows(qs: Any, engine: Engine) -> None:
    q = qs.queue("q23")
    other = qs.queue("q23-other")
    dead = q.enqueue(b"d")
    assert q.claim_one("w").fail("x") is True
    theirs = other.enqueue(b"t")
    theirs_held = other.enqueue(b"th")
    other.claim_batch("w", 1)
    before = _all_rows(engine)
    assert q.cancel(dead) is False
    assert q.cancel(theirs) is False
    assert q.cancel(theirs_held) is False
    assert q.cancel(10**12) is False
    assert q.cancel(-1) is False
    assert _all_rows(engine) == before


def test_q23_cancel_of_a_lapsed_exhausted_row_deletes_it(qs: Any, engine: Engine) -> None:
    q = qs.queue("q23", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    q.claim_one("w")
    lapse(engine, job_id)
    assert q.cancel(job_id) is True  # still a processing row until a claim buries it
    assert dead_row(engine, job_id) is None


# -- Q24 -----------------------------------------------------------------------


def test_q24_get_job_shows_resolved_values(qs: Any) -> None:
    q = qs.queue(
        "q24", QueueOpts(priority=2, max_attempts=6, visibility_timeout=7.5, expires_in=3600)
    )
    plain = q.get_job(q.enqueue(b"plain"))
    assert plain is not None
    assert (plain.priority, plain.max_attempts, plain.visibility_timeout) == (2, 6, 7.5)
    assert plain.run_at == plain.created_at
    assert plain.expires_at - plain.created_at == timedelta(hours=1)
    assert plain.queue == "q24" and plain.status == "pending" and plain.died_at is None
    opts = EnqueueOpts(priority=-4, delay=timedelta(minutes=2), max_attempts=1, expires_in=60)
    tuned = q.get_job(q.enqueue(b"tuned", opts))
    assert tuned is not None
    assert (tuned.priority, tuned.max_attempts) == (-4, 1)
    assert tuned.run_at - tuned.created_at == timedelta(minutes=2)
    assert tuned.expires_at - tuned.created_at == timedelta(minutes=1)
    at = datetime(2035, 1, 1, tzinfo=UTC)
    scheduled = q.get_job(q.enqueue(b"s", EnqueueOpts(run_at=at)))
    assert scheduled is not None and scheduled.run_at == at


def test_q24_get_job_is_a_pure_read(qs: Any, engine: Engine) -> None:
    q = qs.queue("q24", QueueOpts(max_attempts=1))
    exhausted = q.enqueue(b"e")
    q.claim_one("w")
    lapse(engine, exhausted)
    expired = q.enqueue(b"x", EnqueueOpts(expires_in=60))
    expire(engine, expired)
    before = _all_rows(engine)
    for _ in range(3):
        assert q.get_job(exhausted).status == "processing"  # not buried by reading it
        assert q.get_job(expired).status == "pending"  # not swept by reading it
    assert _all_rows(engine) == before


def test_q24_get_job_is_none_for_unknown_or_other_queue_ids(qs: Any) -> None:
    q = qs.queue("q24")
    other = qs.queue("q24-other")
    theirs = other.enqueue(b"t")
    dead_theirs = other.enqueue(b"d")
    other.claim_batch("w", 2)[1].fail()
    assert q.get_job(theirs) is None and q.get_job(dead_theirs) is None
    assert q.get_job(10**12) is None
    assert other.get_job(theirs) is not None and other.get_job(dead_theirs).status == "dead"


# -- Q25 -----------------------------------------------------------------------


def test_q25_sweep_moves_expired_pending_and_processing_rows_to_dead(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q25")
    other = qs.queue("q25-other")
    held, pending, fresh, never = q.enqueue_many([b"h", b"p", b"f", b"n"])
    sql(
        engine,
        "UPDATE alkstore.jobs SET expires_at = clock_timestamp() + interval '1 hour'"
        " WHERE id = :id",
        id=fresh,
    )
    handle = q.claim_one("w")
    assert handle.id == held
    scheduled = q.enqueue(b"s", EnqueueOpts(delay=3600))  # not yet due, but expired
    theirs = other.enqueue(b"t")
    expire(engine, held, pending, scheduled, theirs)
    assert q.sweep_expired() == SweepResult(expired=3, purged=0)
    for job_id in (held, pending, scheduled):
        job = q.get_job(job_id)
        assert job is not None and (job.status, job.last_error) == ("dead", "expired")
    assert q.get_job(fresh).status == "pending" and q.get_job(never).status == "pending"
    assert other.get_job(theirs).status == "pending"  # another queue's: not this sweep's
    assert handle.ack() is False
    assert q.sweep_expired() == SweepResult(expired=0, purged=0)


def test_q25_sweep_purges_dead_rows_older_than_the_retention(qs: Any, engine: Engine) -> None:
    q = qs.queue("q25", QueueOpts(dead_letter_retention=60))
    other = qs.queue("q25-other", QueueOpts(dead_letter_retention=60))
    old, young = q.enqueue_many([b"old", b"young"])
    for h in q.claim_batch("w", 2):
        h.fail()
    theirs = other.enqueue(b"t")
    other.claim_one("w").fail()
    age_dead(engine, old, 120)
    age_dead(engine, young, 10)
    age_dead(engine, theirs, 120)
    assert q.sweep_expired() == SweepResult(expired=0, purged=1)
    assert q.get_job(old) is None and dead_row(engine, old) is None
    assert q.get_job(young).status == "dead"
    assert dead_row(engine, theirs) is not None  # another queue's dead rows: not purged


def test_q25_retention_none_keeps_dead_rows_forever(qs: Any, engine: Engine) -> None:
    q = qs.queue("q25")  # dead_letter_retention=None
    job_id = q.enqueue(b"x")
    q.claim_one("w").fail("kept")
    age_dead(engine, job_id, 100 * 365 * 86400)
    assert q.sweep_expired() == SweepResult(expired=0, purged=0)
    assert q.get_job(job_id).last_error == "kept"


def test_q25_the_purge_is_by_the_sweeping_handles_retention(qs: Any, engine: Engine) -> None:
    keep = qs.queue("q25")
    purge = qs.queue("q25", QueueOpts(dead_letter_retention=0))
    job_id = keep.enqueue(b"x")
    keep.claim_one("w").fail()
    assert keep.sweep_expired().purged == 0
    assert purge.sweep_expired().purged == 1  # retention 0: every dead row goes
    assert keep.get_job(job_id) is None


def test_q25_an_expired_row_swept_and_purged_in_one_sweep(qs: Any, engine: Engine) -> None:
    q = qs.queue("q25", QueueOpts(dead_letter_retention=0))
    job_id = q.enqueue(b"x", EnqueueOpts(expires_in=60))
    expire(engine, job_id)
    assert q.sweep_expired() == SweepResult(expired=1, purged=1)
    assert q.get_job(job_id) is None


def test_q25_an_expired_row_is_not_claimable_but_its_holder_may_ack(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q25")
    acked, beating = q.enqueue_many([b"a", b"b"], EnqueueOpts(expires_in=3600))
    handles = q.claim_batch("w", 2)
    waiting = q.enqueue(b"w", EnqueueOpts(expires_in=3600))
    expire(engine, acked, beating, waiting)
    assert q.claim_one("w2") is None
    assert handles[1].heartbeat(30) is True
    assert handles[0].ack() is True
    assert live_row(engine, acked) is None and dead_row(engine, acked) is None
    assert q.sweep_expired().expired == 2  # the heartbeated one and the waiting one
