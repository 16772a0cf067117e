"""Q27: what a worker does with each handler outcome."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import threading
from typing import Any

import pytest
from sqlalchemy import URL, func, select

from alkstore_sa import AsyncWorker, FailJob, Job, QueueOpts, RetryJob, Store, Worker

from .._workers import KINDS, handler, start_worker, wait_for


def _run_one(
    kind: str, database_url: URL, store: Store, fn: Any, opts: QueueOpts | None = None
) -> tuple[int, list[Job]]:
    """Enqueue one job, run a worker until its handler was called, stop it."""
    q = store.queue("outcomes", opts)
    job_id = q.enqueue(b"payload")
    calls: list[Job] = []

    def body(job: Job) -> Any:
        calls.append(job)
        return fn(job)

    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind,
        database_url,
        lambda s: cls({s.queue("outcomes", opts): handler(kind, body)}, poll_interval=0.2),
    )
    try:
        wait_for(lambda: calls)
    finally:
        running.stop()  # graceful: the outcome is recorded before run() returns
    return job_id, calls


def _db_now(store: Store) -> dt.datetime:
    with store.engine.connect() as conn:
        now = conn.execute(select(func.now())).scalar_one()
    assert isinstance(now, dt.datetime)
    return now


@pytest.mark.parametrize("kind", KINDS)
def test_q27_return_acks_the_job(kind: str, database_url: URL, store: Store) -> None:
    job_id, calls = _run_one(kind, database_url, store, lambda job: None)
    assert calls[0].id == job_id and calls[0].payload == b"payload"
    assert store.queue("outcomes").get_job(job_id) is None


@pytest.mark.parametrize("kind", KINDS)
def test_q27_failjob_dead_letters_with_its_error(
    kind: str, database_url: URL, store: Store
) -> None:
    def fail(job: Job) -> None:
        raise FailJob("card declined")

    job_id, _ = _run_one(kind, database_url, store, fail)
    job = store.queue("outcomes").get_job(job_id)
    assert job is not None
    assert (job.status, job.last_error, job.attempts) == ("dead", "card declined", 1)


@pytest.mark.parametrize("kind", KINDS)
def test_q27_retryjob_retries_after_its_delay(kind: str, database_url: URL, store: Store) -> None:
    def retry(job: Job) -> None:
        raise RetryJob("rate limited", delay=120)

    job_id, _ = _run_one(kind, database_url, store, retry)
    job = store.queue("outcomes").get_job(job_id)
    assert job is not None
    assert (job.status, job.last_error, job.attempts) == ("pending", "rate limited", 1)
    wait = (job.run_at - _db_now(store)).total_seconds()
    assert 110 < wait <= 120


@pytest.mark.parametrize("kind", KINDS)
def test_q27_exception_retries_on_the_curve_with_its_text(
    kind: str, database_url: URL, store: Store
) -> None:
    def boom(job: Job) -> None:
        raise RuntimeError("smtp\x00 down")  # NUL cannot be stored: it is dropped

    opts = QueueOpts(retry_base=100)  # first retry: d = 100, delay in [50, 100] s
    job_id, _ = _run_one(kind, database_url, store, boom, opts)
    job = store.queue("outcomes").get_job(job_id)
    assert job is not None
    assert (job.status, job.last_error, job.attempts) == ("pending", "smtp down", 1)
    wait = (job.run_at - _db_now(store)).total_seconds()
    assert 40 < wait <= 100


@pytest.mark.parametrize("kind", KINDS)
def test_q27_exception_without_text_records_its_type(
    kind: str, database_url: URL, store: Store
) -> None:
    def boom(job: Job) -> None:
        raise KeyError()

    job_id, _ = _run_one(kind, database_url, store, boom, QueueOpts(retry_base=100))
    job = store.queue("outcomes").get_job(job_id)
    assert job is not None and job.last_error == "KeyError"


@pytest.mark.parametrize("kind", KINDS)
def test_q27_exception_on_the_last_attempt_dead_letters(
    kind: str, database_url: URL, store: Store
) -> None:
    def boom(job: Job) -> None:
        raise ValueError("bad payload")

    job_id, _ = _run_one(kind, database_url, store, boom, QueueOpts(max_attempts=1))
    job = store.queue("outcomes").get_job(job_id)
    assert job is not None
    assert (job.status, job.last_error) == ("dead", "bad payload")


@pytest.mark.parametrize("kind", KINDS)
def test_q27_job_timeout_retries_as_failed(kind: str, database_url: URL, store: Store) -> None:
    import threading

    release = threading.Event()
    opts = QueueOpts(retry_base=100)
    q = store.queue("hang", opts)
    job_id = q.enqueue(b"")
    if kind == "sync":

        def hang(job: Job) -> None:
            release.wait(10)

        fn: Any = hang
    else:
        import asyncio

        async def ahang(job: Job) -> None:
            await asyncio.sleep(10)

        fn = ahang
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue("hang", opts): fn}, job_timeout=0.3)
    )
    try:
        job = wait_for(lambda: (j := q.get_job(job_id)) and j.last_error and j)
    finally:
        release.set()
        running.stop()
    assert (job.status, job.attempts, job.last_error) == (
        "pending",
        1,
        "job timed out after 0.3 s",
    )


def _sync_wrapped(fn: Any) -> Any:
    """A plain sync decorator around ``fn``: the result looks like a sync handler."""

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        return fn(*args)

    return wrapper


def test_q27_worker_retries_a_sync_called_handler_that_returned_a_coroutine(
    database_url: URL, store: Store
) -> None:
    ran: list[int] = []

    @_sync_wrapped
    async def body(job: Job) -> None:
        ran.append(job.id)

    q = store.queue("wrapped", QueueOpts(retry_base=100))
    job_id = q.enqueue(b"")
    # The worker's queue carries the long retry too: the retry delay is the
    # retrying queue's option, and a default first retry (0 s) would run the
    # job again before the attempt count could be read.
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker({s.queue("wrapped", QueueOpts(retry_base=100)): body}, poll_interval=0.05),
    )
    try:
        wait_for(lambda: (j := q.get_job(job_id)) is not None and j.attempts == 1 and j.last_error)
    finally:
        running.stop()
    job = q.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 1)
    assert job.last_error is not None and "must be run by AsyncWorker" in job.last_error
    assert ran == []  # its body never ran, and it was not acked as if it had


def test_q27_async_worker_awaits_a_sync_called_handler_that_returned_a_coroutine(
    database_url: URL, store: Store
) -> None:
    ran: list[tuple[int, str]] = []

    @_sync_wrapped
    async def body(job: Job) -> None:
        await asyncio.sleep(0.05)  # a body that really awaits, on the worker's loop
        ran.append((job.id, threading.current_thread().name))

    q = store.queue("wrapped")
    job_id = q.enqueue(b"")
    running = start_worker(
        "async", database_url, lambda s: AsyncWorker({s.queue("wrapped"): body}, poll_interval=0.05)
    )
    try:
        wait_for(lambda: q.get_job(job_id) is None)
    finally:
        running.stop()
    assert [i for i, _ in ran] == [job_id]  # acked only after its body ran
    assert ran[0][1] == "worker-async"  # awaited on the loop, not on a handler thread
