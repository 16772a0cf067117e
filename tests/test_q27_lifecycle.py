"""SPEC Q27: heartbeats keep a slow job single, graceful stop, the shutdown grace."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import Job, QueueOpts, Store

from ._workers import KINDS, start_worker, stuck_handler, wait_for, worker_class


def _slow(kind: str, seconds: float, calls: list[Job], started: threading.Event) -> Any:
    """A handler that records its call and takes ``seconds`` (sync or async)."""
    if kind == "sync":

        def slow(job: Job) -> None:
            calls.append(job)
            started.set()
            time.sleep(seconds)

        return slow

    async def aslow(job: Job) -> None:
        calls.append(job)
        started.set()
        await asyncio.sleep(seconds)

    return aslow


@pytest.mark.parametrize("kind", KINDS)
def test_q27_heartbeats_keep_a_slow_job_from_a_competing_worker(
    kind: str, database_url: URL, store: Store
) -> None:
    # Visibility 0.6 s, handler 2 s: without heartbeats the claim lapses three
    # times over and the competitor (re-polling every 50 ms) runs it again.
    opts = QueueOpts(visibility_timeout=0.6)
    calls: list[Job] = []
    started = threading.Event()
    workers = [
        start_worker(
            kind,
            database_url,
            lambda s: worker_class(kind)(
                {s.queue("slow", opts): _slow(kind, 2.0, calls, started)}, poll_interval=0.05
            ),
        )
        for _ in range(2)
    ]
    q = store.queue("slow", opts)
    try:
        job_id = q.enqueue(b"")
        wait_for(lambda: q.get_job(job_id) is None, timeout=10)
        time.sleep(0.3)  # a double run would show up here
    finally:
        for w in workers:
            w.stop()
    assert [(j.id, j.attempts) for j in calls] == [(job_id, 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_q27_stop_finishes_in_flight_work_and_claims_nothing_new(
    kind: str, database_url: URL, store: Store
) -> None:
    calls: list[Job] = []
    started = threading.Event()
    q = store.queue("drain")
    first, *rest = q.enqueue_many([b"1", b"2", b"3"])
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("drain"): _slow(kind, 0.5, calls, started)}, concurrency=1, poll_interval=0.05
        ),
    )
    assert started.wait(10)
    took = running.stop()
    assert took < 5
    assert [j.id for j in calls] == [first]
    assert q.get_job(first) is None  # finished and acked before run() returned
    for job_id in rest:  # never claimed
        job = q.get_job(job_id)
        assert job is not None and (job.status, job.attempts) == ("pending", 0)


@pytest.mark.parametrize("kind", KINDS)
def test_q27_past_shutdown_timeout_the_job_is_released_attempt_kept(
    kind: str, database_url: URL, store: Store
) -> None:
    release = threading.Event()
    started = threading.Event()
    fn = stuck_handler(kind, started, release)
    q = store.queue("stuck")
    job_id = q.enqueue(b"")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("stuck"): fn}, shutdown_timeout=0.3, poll_interval=0.05
        ),
    )
    try:
        assert started.wait(10)
        took = running.stop()
    finally:
        release.set()
    assert 0.3 <= took < 3
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.worker_id, job.claim_deadline) == (
        "pending",
        1,
        None,
        None,
    )
    again = q.claim_one("next")  # due now: the next worker gets it at once
    assert again is not None and again.id == job_id and again.job.attempts == 2
