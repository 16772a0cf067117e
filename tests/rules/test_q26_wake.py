"""Q26: LISTEN/NOTIFY wake, the claim after LISTEN, the re-poll, listener recovery."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, text

from alkstore_sa import AsyncWorker, EnqueueOpts, Job, Store, Worker

from .._workers import KINDS, handler, start_worker, wait_for

# Far longer than anything a test waits for: a job that arrives in time came
# through the wake path, not the re-poll.
NO_POLL = 30.0


def _worker(kind: str, store: Any, queue: str, fn: Any, **kw: Any) -> Worker | AsyncWorker:
    cls = Worker if kind == "sync" else AsyncWorker
    return cls({store.queue(queue): handler(kind, fn)}, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_q26_enqueue_on_another_connection_wakes_the_worker(
    kind: str, database_url: URL, store: Store
) -> None:
    seen: dict[int, float] = {}
    arrived = threading.Event()

    def record(job: Job) -> None:
        seen[job.id] = time.monotonic()
        arrived.set()

    running = start_worker(
        kind, database_url, lambda s: _worker(kind, s, "wake", record, poll_interval=NO_POLL)
    )
    try:
        q = store.queue("wake")
        # The first job proves LISTEN is up (the worker claims right after it).
        first = q.enqueue(b"warm-up")
        wait_for(lambda: first in seen)
        latencies = []
        for _ in range(20):
            arrived.clear()
            sent = time.monotonic()
            job_id = q.enqueue(b"x")
            assert arrived.wait(5), "job not picked up"
            latencies.append(seen[job_id] - sent)
    finally:
        running.stop()
    # Timing targets live in the benchmarks; this proves the wake path.
    assert statistics.median(latencies) < 0.5, latencies
    assert max(latencies) < 5


@pytest.mark.parametrize("kind", KINDS)
def test_q26_worker_claims_once_right_after_listen(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("backlog")
    ids = q.enqueue_many([b"a", b"b", b"c"])  # enqueued before the worker exists
    done: list[int] = []
    running = start_worker(
        kind,
        database_url,
        lambda s: _worker(kind, s, "backlog", lambda j: done.append(j.id), poll_interval=NO_POLL),
    )
    try:
        wait_for(lambda: len(done) == 3, timeout=5)
    finally:
        running.stop()
    assert sorted(done) == ids


@pytest.mark.parametrize("kind", KINDS)
def test_q26_repoll_picks_up_a_delayed_job_when_it_comes_due(
    kind: str, database_url: URL, store: Store
) -> None:
    done: dict[int, float] = {}
    running = start_worker(
        kind,
        database_url,
        lambda s: _worker(
            kind, s, "later", lambda j: done.setdefault(j.id, time.monotonic()), poll_interval=0.2
        ),
    )
    try:
        q = store.queue("later")
        sent = time.monotonic()
        # Its notification comes at enqueue, a second before it is due.
        job_id = q.enqueue(b"", EnqueueOpts(delay=1))
        wait_for(lambda: job_id in done, timeout=5)
    finally:
        running.stop()
    assert 0.9 <= done[job_id] - sent < 3


def _listener_pids(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
            )
        )
        return [r[0] for r in rows]


@pytest.mark.parametrize("kind", KINDS)
def test_q26_listener_reconnects_after_its_backend_is_terminated(
    kind: str, database_url: URL, store: Store
) -> None:
    done: set[int] = set()
    running = start_worker(
        kind,
        database_url,
        lambda s: _worker(kind, s, "phoenix", lambda j: done.add(j.id), poll_interval=NO_POLL),
    )
    try:
        q = store.queue("phoenix")
        first = q.enqueue(b"")
        wait_for(lambda: first in done)
        (old,) = wait_for(lambda: _listener_pids(store))
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": old}).scalar()
        # A new LISTEN backend appears, and jobs flow through it (well before any re-poll).
        new = wait_for(lambda: [p for p in _listener_pids(store) if p != old], timeout=5)
        assert len(new) == 1
        ids = [q.enqueue(b"") for _ in range(5)]
        wait_for(lambda: done >= set(ids), timeout=5)
    finally:
        running.stop()


def _first_job_arrives(kind: str, url: URL, store: Store, queue: str, **engine_kw: Any) -> None:
    """A worker built on an engine of ``engine_kw`` picks up a job with no re-poll."""
    done: set[int] = set()
    running = start_worker(
        kind,
        url,
        lambda s: _worker(kind, s, queue, lambda j: done.add(j.id), poll_interval=NO_POLL),
        **engine_kw,
    )
    try:
        # Claimed right after LISTEN is up, or by the wake: either needs a listener.
        job_id = store.queue(queue).enqueue(b"")
        wait_for(lambda: job_id in done, timeout=5)
        later = store.queue(queue).enqueue(b"")
        wait_for(lambda: later in done, timeout=5)
    finally:
        running.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_q26_listener_connects_as_the_engine_does_with_connect_args(
    kind: str, database_url: URL, store: Store
) -> None:
    # The URL names a database that does not exist; create_engine's
    # connect_args name the real one, so only the engine knows where to go.
    wrong = database_url.set(database="alkstore_no_such_database")
    # (asyncpg spells libpq's dbname "database".)
    real = {"database" if kind == "asyncpg" else "dbname": database_url.database}
    _first_job_arrives(kind, wrong, store, "via_args", connect_args=real)


def test_q26_listener_connects_as_the_engine_does_with_a_creator(
    database_url: URL, store: Store
) -> None:
    import psycopg

    _, params = store.engine.dialect.create_connect_args(database_url)
    params = {k: v for k, v in params.items() if k != "context"}
    nowhere = URL.create("postgresql+psycopg")  # every detail comes from the creator
    _first_job_arrives(
        "sync", nowhere, store, "via_creator", creator=lambda: psycopg.connect(**params)
    )
