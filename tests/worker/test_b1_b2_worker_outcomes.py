"""B1 (one log record per outcome) and B2 (the handler's traceback in the
history) as both real workers do them, end to end."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from sqlalchemy import URL, text

from alkstore_sa import FailJob, Job, QueueOpts, RetryJob, Store

from .._workers import KINDS, handler, start_worker, wait_for, worker_class

QUEUE = "b1"


def _records(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    """The worker's records about ``job_id`` (the ones carrying its extra fields)."""
    return [
        r
        for r in caplog.records
        if r.name == "alkstore_sa.worker" and getattr(r, "alkstore_job_id", None) == job_id
    ]


def _run_until(
    kind: str,
    database_url: URL,
    store: Store,
    fn: Any,
    done: Any,
    opts: QueueOpts | None = None,
    **worker_kw: Any,
) -> int:
    """Enqueue one job, run a worker with ``fn`` until ``done(job_id)``, stop it."""
    job_id = store.queue(QUEUE, opts).enqueue(b"payload")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue(QUEUE, opts): handler(kind, fn)}, poll_interval=0.05, **worker_kw
        ),
    )
    try:
        wait_for(lambda: done(job_id))
    finally:
        running.stop()
    return job_id


def _gone(store: Store) -> Any:
    return lambda job_id: store.queue(QUEUE).get_job(job_id) is None


def _dead(store: Store) -> Any:
    def dead(job_id: int) -> bool:
        job = store.queue(QUEUE).get_job(job_id)
        return job is not None and job.status == "dead"

    return dead


def _retried(store: Store) -> Any:
    def retried(job_id: int) -> bool:
        job = store.queue(QUEUE).get_job(job_id)
        return job is not None and job.status == "pending" and job.attempts == 1

    return retried


@pytest.mark.parametrize("kind", KINDS)
def test_b1_ack_is_one_debug_record_with_extra_fields(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(kind, database_url, store, lambda job: None, _gone(store))
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == f"job {job_id} on b1 acked (attempt 1/5)"
    assert (record.alkstore_queue, record.alkstore_attempt, record.alkstore_outcome) == (
        QUEUE,
        1,
        "acked",
    )
    assert record.exc_info is None


@pytest.mark.parametrize("kind", KINDS)
def test_b1_retry_after_an_exception_is_a_warning_with_error_delay_and_traceback(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(job: Job) -> None:
        raise ValueError("bad payload")

    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(
        kind, database_url, store, boom, _retried(store), QueueOpts(retry_base=60, retry_cap=60)
    )
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert message.startswith(f"job {job_id} on b1 raised ValueError (attempt 1/5); retrying in ")
    assert message.endswith("s: bad payload")
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert record.alkstore_outcome == "retried"


@pytest.mark.parametrize("kind", KINDS)
def test_b1_a_deliberate_retryjob_has_no_traceback(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def later(job: Job) -> None:
        raise RetryJob("rate limited", delay=120)

    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(kind, database_url, store, later, _retried(store))
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"job {job_id} on b1 asked to be retried (attempt 1/5); retrying in 120s: rate limited"
    )
    assert record.exc_info is None


@pytest.mark.parametrize("kind", KINDS)
def test_b1_the_last_attempt_failing_is_an_error_saying_dead_lettered_and_why(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(job: Job) -> None:
        raise KeyError("order")

    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(kind, database_url, store, boom, _dead(store), QueueOpts(max_attempts=1))
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"job {job_id} on b1 dead-lettered after attempt 1/1: max attempts exceeded; "
        "its last attempt raised KeyError: 'order'"
    )
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert record.alkstore_outcome == "dead"


@pytest.mark.parametrize("kind", KINDS)
def test_b1_failjob_is_an_error_saying_dead_lettered_without_traceback(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(job: Job) -> None:
        raise FailJob("card declined")

    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(kind, database_url, store, fail, _dead(store))
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"job {job_id} on b1 dead-lettered after attempt 1/5: failed by its handler: card declined"
    )
    assert record.exc_info is None


@pytest.mark.parametrize("kind", KINDS)
def test_b1_a_lost_claim_is_one_warning(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    finished: list[int] = []

    def cancel_myself(job: Job) -> None:
        # Claimed again elsewhere (a lapse and a reclaim): the ack finds no claim.
        # (A cancel would be C1's outcome `cancelled`, not a lost claim.)
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE alkstore.jobs SET attempts = attempts + 1 WHERE id = :id"),
                {"id": job.id},
            )
        finished.append(job.id)

    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    job_id = _run_until(
        kind,
        database_url,
        store,
        cancel_myself,
        lambda job_id: (
            finished
            and any(
                getattr(r, "alkstore_outcome", None) == "lost" for r in _records(caplog, job_id)
            )
        ),
    )
    (record,) = _records(caplog, job_id)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"job {job_id} on b1 (attempt 1/5): claim lost: before the ack"


@pytest.mark.parametrize("kind", KINDS)
def test_b2_a_worker_records_the_handlers_traceback(
    kind: str, database_url: URL, store: Store
) -> None:
    def parse_order(job: Job) -> None:
        raise ValueError("not json")

    job_id = _run_until(
        kind, database_url, store, parse_order, _retried(store), QueueOpts(retry_base=60)
    )
    job = store.queue(QUEUE).get_job(job_id)
    assert job is not None
    (entry,) = job.errors
    assert (entry.attempt, entry.error) == (1, "not json")
    assert entry.traceback is not None
    assert entry.traceback.startswith("Traceback (most recent call last):")
    assert "in parse_order" in entry.traceback
    assert entry.traceback.rstrip().endswith("ValueError: not json")


@pytest.mark.parametrize("kind", KINDS)
def test_b2_a_deliberate_failjob_still_records_where_it_was_raised(
    kind: str, database_url: URL, store: Store
) -> None:
    """The history keeps the traceback of anything the handler raised (B2: "when
    a Worker ran the handler"); only the log leaves it out for FailJob (B1)."""

    def refuse(job: Job) -> None:
        raise FailJob("no such order")

    job_id = _run_until(kind, database_url, store, refuse, _dead(store))
    job = store.queue(QUEUE).get_job(job_id)
    assert job is not None
    (entry,) = job.errors
    assert entry.error == "no such order"
    assert entry.traceback is not None and "in refuse" in entry.traceback


def test_b2_a_timeout_records_no_traceback(database_url: URL, store: Store) -> None:
    """A handler past job_timeout raised nothing: its entry has no traceback."""

    async def slow(job: Job) -> None:
        await asyncio.sleep(5)

    opts = QueueOpts(retry_base=60)
    job_id = store.queue(QUEUE, opts).enqueue(b"x")
    running = start_worker(
        "async",
        database_url,
        lambda s: worker_class("async")(
            {s.queue(QUEUE, opts): slow}, poll_interval=0.05, job_timeout=0.1
        ),
    )
    try:
        wait_for(lambda: _retried(store)(job_id))
    finally:
        running.stop()
    job = store.queue(QUEUE).get_job(job_id)
    assert job is not None
    (entry,) = job.errors
    assert (entry.error, entry.traceback) == ("job timed out after 0.1 s", None)
