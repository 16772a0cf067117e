"""Z1: ``handle.snooze(delay)`` -- back to pending later, the attempt refunded, no error kept."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, HandleSpentError, QueueOpts, SnoozeJob

from .._qtools import db_now, dead_row, expire, lapse, live_row


def test_z1_snooze_ten_times_with_max_attempts_1_still_runs(qs: Any, engine: Engine) -> None:
    q = qs.queue("z1", QueueOpts(max_attempts=1))
    job_id = q.enqueue(b"x")
    for _ in range(10):
        handle = q.claim_one("w")
        assert handle is not None and handle.id == job_id
        assert handle.job.attempts == 1
        assert handle.snooze(0) is True
    handle = q.claim_one("w")
    assert handle is not None and handle.job.attempts == 1
    assert handle.job.last_error is None and handle.job.errors == ()
    assert handle.ack() is True
    assert q.get_job(job_id) is None
    assert dead_row(engine, job_id) is None


def test_z1_snooze_sets_run_at_clears_claim_and_records_nothing(qs: Any, engine: Engine) -> None:
    q = qs.queue("z1")
    job_id = q.enqueue(b"x")
    first = q.claim_one("w")
    assert first.retry("boom", delay=0) is True  # an error before, kept as it was
    handle = q.claim_one("w")
    assert handle.job.attempts == 2
    before = db_now(engine)
    assert handle.snooze(timedelta(seconds=30)) is True
    after = db_now(engine)
    row = live_row(engine, job_id)
    assert row["status"] == "pending"
    assert row["attempts"] == 1
    assert row["worker_id"] is None and row["claim_deadline"] is None
    assert before + timedelta(seconds=30) <= row["run_at"] <= after + timedelta(seconds=30)
    job = q.get_job(job_id)
    assert job.last_error == "boom"
    assert [e.error for e in job.errors] == ["boom"]  # the snooze added none
    assert q.claim_one("w") is None  # not due for 30 s


def test_z1_snooze_is_one_shot_and_obeys_q14(qs: Any, engine: Engine) -> None:
    q = qs.queue("z1")
    q.enqueue_many([b"a", b"b"])
    a, b = q.claim_batch("w", 2)
    assert a.snooze(0) is True
    with pytest.raises(HandleSpentError):
        a.snooze(0)
    with pytest.raises(HandleSpentError):
        a.ack()
    lapse(engine, b.id)
    assert b.snooze(0) is False  # lapsed: refused, never raises
    assert live_row(engine, b.id)["status"] == "processing"


def test_z1_negative_delay_is_refused_before_sql(qs: Any, engine: Engine) -> None:
    q = qs.queue("z1")
    q.enqueue(b"x")
    handle = q.claim_one("w")
    with pytest.raises(ValueError):
        handle.snooze(-1)
    with pytest.raises(TypeError):
        handle.snooze("soon")
    assert handle.ack() is True  # a refused snooze consumed nothing (Q20)
    with pytest.raises(ValueError):
        SnoozeJob(-1)
    assert SnoozeJob(timedelta(seconds=2)).delay == 2.0


def test_z1_a_snoozed_job_respects_expiry(qs: Any, engine: Engine) -> None:
    q = qs.queue("z1")
    job_id = q.enqueue(b"x", EnqueueOpts(expires_in=60))
    handle = q.claim_one("w")
    assert handle.snooze(0) is True
    expire(engine, job_id)
    assert q.claim_one("w") is None  # expired: not claimable (Q10)
    assert q.sweep_expired().expired == 1
    job = q.get_job(job_id)
    assert job.status == "dead" and job.last_error == "expired"
