"""Z1 in a Worker: a handler raises ``SnoozeJob(delay)``; outcome ``snoozed``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import EnqueueOpts, Job, QueueOpts, SnoozeJob, Store
from alkstore_sa.testing import run_due

from .._qtools import dead_row, expire
from .._workers import KINDS, handler, start_worker, wait_for, worker_class


@pytest.mark.parametrize("kind", KINDS)
def test_z1_worker_snoozed_ten_times_with_max_attempts_1_still_runs(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    opts = QueueOpts(max_attempts=1)
    job_id = store.queue("z1w", opts).enqueue(b"x")
    calls: list[Job] = []

    def body(job: Job) -> None:
        calls.append(job)
        if len(calls) <= 10:
            raise SnoozeJob(0)

    cls = worker_class(kind)
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    running = start_worker(
        kind,
        database_url,
        lambda s: cls({s.queue("z1w", opts): handler(kind, body)}, poll_interval=0.2),
    )
    try:
        wait_for(lambda: len(calls) >= 11 and store.queue("z1w").get_job(job_id) is None)
    finally:
        running.stop()
    assert [c.attempts for c in calls] == [1] * 11  # every snooze refunded its attempt
    assert dead_row(store.engine, job_id) is None
    snoozed = [r for r in caplog.records if getattr(r, "alkstore_outcome", None) == "snoozed"]
    assert len(snoozed) == 10
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in snoozed)


@pytest.mark.parametrize("kind", KINDS)
def test_z1_worker_snooze_keeps_no_error_and_respects_expiry(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("z1w")
    job_id = q.enqueue(b"x", EnqueueOpts(expires_in=600))
    calls: list[Job] = []

    def body(job: Job) -> None:
        calls.append(job)
        raise SnoozeJob(3600)

    cls = worker_class(kind)
    running = start_worker(
        kind,
        database_url,
        lambda s: cls({s.queue("z1w"): handler(kind, body)}, poll_interval=0.2),
    )
    try:
        wait_for(lambda: calls and q.get_job(job_id).status == "pending")
    finally:
        running.stop()
    job = q.get_job(job_id)
    assert job.attempts == 0 and job.last_error is None and job.errors == ()
    expire(store.engine, job_id)
    assert q.sweep_expired().expired == 1
    assert q.get_job(job_id).status == "dead"
    assert len(calls) == 1


def test_z1_run_due_reports_snoozed(store: Store) -> None:
    q = store.queue("z1t")
    job_id = q.enqueue(b"x")

    def snoozing(job: Job) -> Any:
        raise SnoozeJob(60)

    report = run_due(q, handler=snoozing)
    assert report.snoozed == [job_id] and report.runs == 1
    assert q.get_job(job_id).status == "pending"
