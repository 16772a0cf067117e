"""Worker runtime behaviour around the rules: batching, lost claims, forced stop."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import URL

from alkstore_sa import AsyncWorker, Job, QueueOpts, Store

from ._workers import KINDS, handler, start_worker, stuck_handler, wait_for, worker_class


@pytest.mark.parametrize("kind", KINDS)
def test_worker_drains_two_queues_exactly_once(kind: str, database_url: URL, store: Store) -> None:
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def count(job: Job) -> None:
        with lock:
            seen[job.id] += 1

    ids = store.queue("a").enqueue_many([b""] * 150) + store.queue("b").enqueue_many([b""] * 150)
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("a"): handler(kind, count), s.queue("b"): handler(kind, count)},
            concurrency=4,
        ),
    )
    try:
        wait_for(lambda: len(seen) == len(ids), timeout=30)
    finally:
        running.stop()
    assert set(seen) == set(ids) and set(seen.values()) == {1}
    assert store.queue("a").get_job(ids[0]) is None and store.queue("b").get_job(ids[-1]) is None


@pytest.mark.parametrize("kind", KINDS)
def test_worker_heartbeat_notices_a_lost_claim(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    opts = QueueOpts(visibility_timeout=0.6)
    q = store.queue("lost", opts)
    job_id = q.enqueue(b"")
    finished = threading.Event()

    def cancelled_under_it(job: Job) -> None:
        q.cancel(job.id)  # someone else removes the job while it runs
        time.sleep(0.5)  # the heartbeat at ~0.2 s finds the claim gone
        finished.set()

    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("lost", opts): cancelled_under_it}, poll_interval=0.2
        ),
    )
    try:
        assert finished.wait(10)
    finally:
        running.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"job {job_id}: heartbeat found its claim gone") for m in messages)
    assert f"job {job_id} finished after its claim was lost; not acked" in messages


@pytest.mark.parametrize("kind", KINDS)
def test_worker_second_stop_releases_in_flight_jobs_at_once(
    kind: str, database_url: URL, store: Store
) -> None:
    started = threading.Event()
    release = threading.Event()
    fn = stuck_handler(kind, started, release)
    q = store.queue("stuck")
    job_id = q.enqueue(b"")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)({s.queue("stuck"): fn}, shutdown_timeout=30),
    )
    try:
        assert started.wait(10)
        began = time.monotonic()
        running.worker.stop()
        running.worker.stop()  # like a second Ctrl-C: do not wait out the 30 s
        took = running.join() - began
    finally:
        release.set()
    assert took < 5
    job = q.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 1)


def test_async_worker_runs_a_plain_sync_handler_in_a_thread(
    database_url: URL, store: Store
) -> None:
    threads: list[str] = []
    job_id = store.queue("mixed").enqueue(b"")
    running = start_worker(
        "async",
        database_url,
        lambda s: AsyncWorker(
            {s.queue("mixed"): lambda j: threads.append(threading.current_thread().name)}
        ),
    )
    try:
        wait_for(lambda: threads)
        wait_for(lambda: store.queue("mixed").get_job(job_id) is None)
    finally:
        running.stop()
    assert threads[0].startswith("alkstore-handler")


@pytest.mark.parametrize("kind", KINDS)
def test_worker_refills_a_backlog_with_full_claims(
    kind: str, database_url: URL, store: Store
) -> None:
    """Claims sized to free slots, but a backlog waits for the slots to free up.

    A claim stamps every job it takes with one ``claim_deadline`` (its
    statement's ``now()`` plus the visibility timeout), so the distinct
    deadlines the handlers see count the claims.  Claiming whenever a single
    slot freed took ~2x as many claims (mostly of 3 and 7 jobs).
    """
    jobs, concurrency = 60, 10
    ids = store.queue("backlog").enqueue_many([b""] * jobs)
    deadlines: Counter[object] = Counter()
    lock = threading.Lock()

    def record(job: Job) -> None:
        with lock:
            deadlines[job.claim_deadline] += 1

    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("backlog"): handler(kind, record)}, concurrency=concurrency
        ),
    )
    try:
        wait_for(lambda: sum(deadlines.values()) == len(ids), timeout=30)
    finally:
        running.stop()
    assert max(deadlines.values()) <= concurrency  # never more than the free slots
    assert len(deadlines) <= 8, sorted(deadlines.values())  # 6 when every claim is full
