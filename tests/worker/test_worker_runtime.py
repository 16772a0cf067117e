"""Worker runtime behaviour end to end: several queues, mixed handler kinds.

The runtime's timing (heartbeat schedule, lost claims, backlog refills,
the shutdown grace, a second stop) is pinned on the fake backend in
``test_worker_timing.py``; here what only a real database shows.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import URL

from alkstore_sa import AsyncWorker, Job, Store

from .._workers import KINDS, handler, start_worker, wait_for, worker_class


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
