"""B2: each retry and dead-letter appends {attempt, at, error, traceback} to the job.

The handle-level rules run on both faces (``qs``); what a Worker adds (the
handler's traceback) is in ``test_b1_b2_worker_outcomes.py``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from alkstore_sa import JobError, QueueOpts

from .._qtools import db_now, expire, lapse

FAST = QueueOpts(max_attempts=3)


def _claim(q: Any) -> Any:
    handle = q.claim_one("w")
    assert handle is not None
    return handle


def test_b2_a_retry_appends_its_error_with_no_traceback(qs: Any, engine: Engine) -> None:
    q = qs.queue("b2_retry", FAST)
    job_id = q.enqueue(b"x")
    before = db_now(engine)
    assert _claim(q).retry("first", delay=0) is True
    job = q.get_job(job_id)
    assert job.errors == (JobError(1, job.errors[0].at, "first", None),)
    assert before <= job.errors[0].at <= db_now(engine)
    assert job.last_error == "first"


def test_b2_history_is_oldest_first_and_the_last_entry_is_last_error(qs: Any) -> None:
    q = qs.queue("b2_order", QueueOpts(max_attempts=5))
    job_id = q.enqueue(b"x")
    for n in range(3):
        assert _claim(q).retry(f"error {n}", delay=0) is True
    job = q.get_job(job_id)
    assert [(e.attempt, e.error) for e in job.errors] == [
        (1, "error 0"),
        (2, "error 1"),
        (3, "error 2"),
    ]
    assert job.errors[0].at <= job.errors[1].at <= job.errors[2].at
    assert job.errors[-1].error == job.last_error


def test_b2_a_retry_without_an_error_records_the_kept_last_error(qs: Any) -> None:
    """Q17 keeps last_error when retry() gives none; the entry says the same."""
    q = qs.queue("b2_none", QueueOpts(max_attempts=5))
    job_id = q.enqueue(b"x")
    assert _claim(q).retry(delay=0) is True
    assert [e.error for e in q.get_job(job_id).errors] == [None]
    assert _claim(q).retry("boom", delay=0) is True
    assert _claim(q).retry(delay=0) is True
    job = q.get_job(job_id)
    assert [e.error for e in job.errors] == [None, "boom", "boom"]
    assert job.errors[-1].error == job.last_error == "boom"


def test_b2_keeps_only_the_last_ten(qs: Any) -> None:
    q = qs.queue("b2_ten", QueueOpts(max_attempts=20))
    job_id = q.enqueue(b"x")
    for n in range(1, 13):
        assert _claim(q).retry(f"e{n}", delay=0) is True
    job = q.get_job(job_id)
    assert [e.attempt for e in job.errors] == list(range(3, 13))
    assert [e.error for e in job.errors] == [f"e{n}" for n in range(3, 13)]


def test_b2_fail_appends_to_the_dead_row(qs: Any) -> None:
    q = qs.queue("b2_fail", FAST)
    job_id = q.enqueue(b"x")
    assert _claim(q).retry("flaky", delay=0) is True
    assert _claim(q).fail("gave up") is True
    (dead,) = q.jobs(status="dead")
    assert dead.id == job_id
    assert [(e.attempt, e.error, e.traceback) for e in dead.errors] == [
        (1, "flaky", None),
        (2, "gave up", None),
    ]
    assert dead.errors[-1].error == dead.last_error
    assert q.get_job(job_id).errors == dead.errors  # get_job shows dead rows too


def test_b2_fail_without_an_error_records_failed(qs: Any) -> None:
    q = qs.queue("b2_fail_default", FAST)
    job_id = q.enqueue(b"x")
    assert _claim(q).fail() is True
    assert [e.error for e in q.get_job(job_id).errors] == ["failed"]


def test_b2_an_exhausted_retry_records_max_attempts_exceeded(qs: Any) -> None:
    q = qs.queue("b2_exhausted", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    assert _claim(q).retry() is True  # no attempt left: dead (Q18)
    job = q.get_job(job_id)
    assert job.status == "dead"
    assert [(e.attempt, e.error) for e in job.errors] == [(1, "max attempts exceeded")]


def test_b2_the_q12_move_appends_its_own_entry(qs: Any, engine: Engine) -> None:
    q = qs.queue("b2_lapsed", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    _claim(q)
    lapse(engine, job_id)
    assert q.claim_one("w2") is None  # the claim buries the lapsed, exhausted job (Q12)
    job = q.get_job(job_id)
    assert job.status == "dead"
    assert [(e.attempt, e.error, e.traceback) for e in job.errors] == [
        (1, "max attempts exceeded", None)
    ]


def test_b2_the_expiry_sweep_appends_expired(qs: Any, engine: Engine) -> None:
    q = qs.queue("b2_expired", FAST)
    job_id = q.enqueue(b"x")
    assert _claim(q).retry("slow", delay=0) is True
    expire(engine, job_id)
    assert q.sweep_expired().expired == 1
    job = q.get_job(job_id)
    assert [(e.attempt, e.error) for e in job.errors] == [(1, "slow"), (1, "expired")]
    assert job.last_error == "expired"


def test_b2_requeue_keeps_the_history(qs: Any) -> None:
    """O2 moves a dead job back with its history; its next failure adds to it."""
    q = qs.queue("b2_requeue", FAST)
    job_id = q.enqueue(b"x")
    assert _claim(q).fail("bad input") is True
    assert q.requeue_dead([job_id]) == 1
    live = q.get_job(job_id)
    assert live.status == "pending"
    assert [e.error for e in live.errors] == ["bad input"]
    assert _claim(q).retry("again", delay=0) is True
    assert [e.error for e in q.get_job(job_id).errors] == ["bad input", "again"]


def test_b2_listing_shows_histories_of_live_and_dead_rows(qs: Any) -> None:
    q = qs.queue("b2_list", FAST)
    live_id = q.enqueue(b"a")
    dead_id = q.enqueue(b"b")
    assert _claim(q).retry("live error", delay=0) is True
    handle = _claim(q)
    assert handle.job.id == dead_id
    assert handle.fail("dead error") is True
    by_id = {job.id: job for job in q.jobs()}
    assert [e.error for e in by_id[live_id].errors] == ["live error"]
    assert [e.error for e in by_id[dead_id].errors] == ["dead error"]


def test_b2_a_claimed_job_carries_its_history(qs: Any) -> None:
    """The handler sees what went wrong before (Job.errors on the claimed job)."""
    q = qs.queue("b2_claimed", FAST)
    q.enqueue(b"x")
    assert _claim(q).retry("once", delay=0) is True
    again = _claim(q)
    assert [e.error for e in again.job.errors] == ["once"]


def test_b2_a_fresh_job_has_no_history(qs: Any) -> None:
    q = qs.queue("b2_fresh")
    job_id = q.enqueue(b"x")
    assert q.get_job(job_id).errors == ()
    assert q.get_job(job_id).last_error is None
