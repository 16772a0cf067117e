"""R3: ``q.wait(job_id, timeout=)`` -- LISTEN on the done channel, re-poll every second."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Engine

from alkstore_sa import QueueOpts

from .._qtools import sql

KEEP = QueueOpts(keep_completed=600)


def _listeners(engine: Engine) -> int:
    rows = sql(
        engine,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'alkstore wait'",
    )
    return int(rows[0]["n"])


def _no_listener_left(engine: Engine) -> bool:
    """True once no waiter's connection is left: a closed connection's server
    process leaves pg_stat_activity a moment after the client hung up."""
    deadline = time.monotonic() + 5
    while _listeners(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _listeners(engine) == 0


def _later(delay: float, fn: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        fn()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_r3_wait_returns_the_completed_job_soon_after_the_ack(qs: Any, engine: Engine) -> None:
    q = qs.queue("r3", KEEP)
    lags = []
    for _ in range(5):
        job_id = q.enqueue(b"x")
        handle = q.claim_one("w")
        acked_at: list[float] = []

        def ack(h: Any = handle, at: list[float] = acked_at) -> None:
            h.ack(b"done")
            at.append(time.monotonic())

        thread = _later(0.3, ack)
        job = q.wait(job_id, timeout=10)
        returned = time.monotonic()
        thread.join()
        assert job.status == "completed" and job.result == b"done"
        lags.append(returned - acked_at[0])
    # Woken by the notification, not the one-second poll.
    assert statistics.median(lags) < 0.25, lags


def test_r3_wait_returns_a_dead_job_and_none_for_nothing_kept(qs: Any) -> None:
    q = qs.queue("r3", QueueOpts(max_attempts=1))
    dead = q.enqueue(b"x")
    assert q.claim_one("w").fail("nope")
    job = q.wait(dead, timeout=5)
    assert job.status == "dead" and job.last_error == "nope"
    plain = q.enqueue(b"y")
    _later(0.2, lambda: q.claim_one("w").ack())
    assert q.wait(plain, timeout=5) is None  # acked without keep_completed
    cancelled = q.enqueue(b"z")
    _later(0.2, lambda: q.cancel(cancelled))
    assert q.wait(cancelled, timeout=5) is None
    assert q.wait(10**12, timeout=5) is None  # no such job


def test_r3_timeout_raises_and_leaves_no_listener(qs: Any, engine: Engine) -> None:
    q = qs.queue("r3", KEEP)
    job_id = q.enqueue(b"x")
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        q.wait(job_id, timeout=0.5)
    assert 0.45 <= time.monotonic() - began < 3
    assert _no_listener_left(engine)
    with pytest.raises(ValueError):
        q.wait(job_id, timeout=-1)


def test_r3_a_lost_listen_delays_a_wait_by_at_most_the_poll(qs: Any, engine: Engine) -> None:
    q = qs.queue("r3", KEEP)
    job_id = q.enqueue(b"x")
    handle = q.claim_one("w")
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(q.wait(job_id, timeout=10)))
    waiter.start()
    deadline = time.monotonic() + 5
    while _listeners(engine) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    # Kill the listener, then ack at once: the notification may find no one.
    sql(
        engine,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'alkstore wait'",
    )
    handle.ack(b"r")
    acked = time.monotonic()
    waiter.join(10)
    assert result and result[0].status == "completed"
    assert time.monotonic() - acked < 1.6


def test_r3_many_concurrent_waiters_share_one_listener(qs: Any, engine: Engine) -> None:
    q = qs.queue("r3", KEEP)
    ids = q.enqueue_many([b"%d" % i for i in range(40)])
    seen: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            seen.append(_listeners(engine))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    with ThreadPoolExecutor(40) as pool:
        futures = [pool.submit(q.wait, i, timeout=20) for i in ids]
        time.sleep(1.0)
        for handle in q.claim_batch("w", 40):
            assert handle.ack(b"r" + handle.payload)
        jobs = [f.result() for f in futures]
    watcher.join()
    assert [j.result for j in jobs] == [b"r%d" % i for i in range(40)]
    assert max(seen) == 1  # one LISTEN connection for every waiter of the store
    assert _no_listener_left(engine)


def test_r3_a_death_wakes_the_waiter_before_the_poll(qs: Any) -> None:
    q = qs.queue("r3", QueueOpts(max_attempts=1))
    lags = []
    for i in range(3):
        job_id = q.enqueue(b"x")
        handle = q.claim_one("w")
        died: list[float] = []

        def kill(h: Any = handle, at: list[float] = died, retry: bool = i % 2 == 0) -> None:
            assert (h.retry("gone", delay=0) if retry else h.fail("gone")) is True
            at.append(time.monotonic())

        thread = _later(0.3, kill)
        job = q.wait(job_id, timeout=10)
        woke = time.monotonic()
        thread.join()  # the killer notes its time after its write commits: maybe after we woke
        lags.append(woke - died[0])
        assert job.status == "dead" and job.last_error == "gone"
    assert statistics.median(lags) < 0.25, lags
