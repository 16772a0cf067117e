"""C1 end to end: ``cancel()`` tells the Worker or AsyncWorker running the job.

The fake-clock twin (exact times, the claimed-ahead drop) is
``test_c1_cancel_timing.py``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, text

from alkstore_sa import Job, QueueOpts, Store, job_cancelled

from .._qtools import dead_row
from .._workers import KINDS, start_worker, wait_for, worker_class

ASYNC_KINDS = [k for k in KINDS if k != "sync"]
SHORT = QueueOpts(visibility_timeout=0.6)  # beaten every 0.2 s: the fallback is quick


def _outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "alkstore_outcome", None) == outcome]


def _sync_waiter(started: threading.Event, seen: list[float]) -> Any:
    """A sync handler that runs until ``job_cancelled()`` turns True (at most 5 s)."""

    def body(job: Job) -> None:
        assert not job_cancelled()
        started.set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if job_cancelled():
                seen.append(time.monotonic())
                return
            time.sleep(0.005)

    return body


def _async_waiter(started: threading.Event, seen: list[float]) -> Any:
    """An async handler that sleeps until it is cancelled (at most 5 s)."""

    async def body(job: Job) -> None:
        started.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append(time.monotonic())
            assert job_cancelled()
            raise

    return body


def _cancel_running(
    kind: str,
    database_url: URL,
    store: Store,
    body: Any,
    stop_it: Any,
    opts: QueueOpts | None = None,
) -> tuple[int, float, list[float]]:
    """Run ``body`` on a job, stop it with ``stop_it(queue, job_id)`` once it runs."""
    q = store.queue("c1", opts)
    job_id = q.enqueue(b"x")
    started = threading.Event()
    seen: list[float] = []
    cls = worker_class(kind)
    running = start_worker(
        kind,
        database_url,
        lambda s: cls({s.queue("c1", opts): body(started, seen)}, poll_interval=0.2),
    )
    try:
        assert started.wait(10)
        time.sleep(0.05)  # LISTEN is up by now (it claimed after it)
        stop_it(q, job_id)
        # C1's second counts from the cancel's commit (when the worker is told),
        # not from before the caller's own round trip, which a loaded machine
        # can stretch by itself.
        at = time.monotonic()
        wait_for(lambda: seen, timeout=5)
    finally:
        running.stop()
    return job_id, seen[0] - at, seen


@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_c1_async_handler_gets_cancelled_error_within_1s(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    job_id, took, _ = _cancel_running(
        kind, database_url, store, _async_waiter, lambda q, i: q.cancel(i)
    )
    assert took < 1.0
    [record] = _outcomes(caplog, "cancelled")
    assert record.levelno == logging.INFO and record.alkstore_job_id == job_id
    assert not _outcomes(caplog, "retried") and not _outcomes(caplog, "lost")
    assert dead_row(store.engine, job_id) is None


@pytest.mark.parametrize("kind", KINDS)
def test_c1_sync_handler_sees_job_cancelled(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    assert not job_cancelled()  # outside a handler
    # A plain sync handler on both kinds (an AsyncWorker runs it in a thread).
    job_id, took, _ = _cancel_running(
        kind, database_url, store, _sync_waiter, lambda q, i: q.cancel(i)
    )
    assert took < 1.0
    assert [r.alkstore_job_id for r in _outcomes(caplog, "cancelled")] == [job_id]
    assert not _outcomes(caplog, "acked") and not _outcomes(caplog, "lost")


@pytest.mark.parametrize("kind", KINDS)
def test_c1_listen_down_the_heartbeat_finds_the_row_gone(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")

    def delete_quietly(q: Any, job_id: int) -> None:  # no NOTIFY: as if LISTEN were down
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM alkstore.jobs WHERE id = :id"), {"id": job_id})

    waiter = _sync_waiter if kind == "sync" else _async_waiter
    job_id, took, _ = _cancel_running(kind, database_url, store, waiter, delete_quietly, SHORT)
    assert took < 1.0  # by the next heartbeat (every 0.2 s)
    assert [r.alkstore_job_id for r in _outcomes(caplog, "cancelled")] == [job_id]


@pytest.mark.parametrize("kind", KINDS)
def test_c1_session_handler_writes_roll_back(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE c1_writes (job_id bigint)"))
    insert = text("INSERT INTO c1_writes VALUES (:id)")

    def body(started: threading.Event, seen: list[float]) -> Any:
        if kind == "sync":

            def sync_body(job: Job, session: Any) -> None:
                session.execute(insert, {"id": job.id})
                session.flush()
                _sync_waiter(started, seen)(job)

            return sync_body

        async def async_body(job: Job, session: Any) -> None:
            await session.execute(insert, {"id": job.id})
            await session.flush()
            await _async_waiter(started, seen)(job)

        return async_body

    job_id, _, _ = _cancel_running(kind, database_url, store, body, lambda q, i: q.cancel(i))
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM c1_writes")).scalar() == 0
    assert [r.alkstore_job_id for r in _outcomes(caplog, "cancelled")] == [job_id]


@pytest.mark.parametrize("kind", KINDS)
def test_c1_cancel_racing_the_handlers_ack_whichever_commits_first_wins(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="alkstore_sa.worker")
    q = store.queue("c1r")
    started: dict[int, threading.Event] = {}
    ids = q.enqueue_many([b"x"] * 12)
    for job_id in ids:
        started[job_id] = threading.Event()

    def body(job: Job) -> None:
        started[job.id].set()
        time.sleep(0.002 * (job.id % 5))  # some ack before the cancel, some after

    cls = worker_class(kind)
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue("c1r"): body}, concurrency=4, poll_interval=0.2)
    )
    cancelled: dict[int, bool] = {}
    try:
        for job_id in ids:
            assert started[job_id].wait(10)
            cancelled[job_id] = q.cancel(job_id)  # never raises, whoever wins
        wait_for(lambda: len(_settled(caplog)) == len(ids))
    finally:
        running.stop()  # re-raises anything run() raised
    settled = _settled(caplog)
    for job_id in ids:
        assert q.get_job(job_id) is None and dead_row(store.engine, job_id) is None
        if cancelled[job_id]:  # the cancel committed first: never acked
            assert settled[job_id] in ("cancelled", "lost")
        else:  # the ack committed first: the cancel found nothing
            assert settled[job_id] == "acked"


def _settled(caplog: pytest.LogCaptureFixture) -> dict[int, str]:
    return {
        r.alkstore_job_id: r.alkstore_outcome
        for r in caplog.records
        if getattr(r, "alkstore_outcome", None) in ("acked", "cancelled", "lost")
    }


@pytest.mark.parametrize("kind", KINDS)
def test_c1_a_job_claimed_ahead_and_not_started_is_dropped_unrun(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    q = store.queue("c1a")
    ran: list[bytes] = []
    long_started = threading.Event()
    release = threading.Event()
    if kind == "sync":

        def body(job: Job) -> None:
            ran.append(job.payload)
            if job.payload == b"long":
                long_started.set()
                release.wait(10)

    else:

        async def body(job: Job) -> None:  # type: ignore[misc]
            ran.append(job.payload)
            if job.payload == b"long":
                long_started.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)

    cls = worker_class(kind)
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue("c1a"): body}, concurrency=1, poll_interval=5)
    )
    try:
        shorts = q.enqueue_many([b"short"] * 3)  # short handlers: it claims one batch ahead
        wait_for(lambda: all(q.get_job(i) is None for i in shorts))
        long_id, ahead = q.enqueue_many([b"long", b"ahead"])  # one wake, one claim of two
        assert long_started.wait(10)
        wait_for(lambda: q.get_job(ahead).status == "processing")  # held, waiting in ready
        assert q.cancel(ahead) is True
        wait_for(lambda: _outcomes(caplog, "cancelled"))
        release.set()
        wait_for(lambda: q.get_job(long_id) is None)
    finally:
        release.set()
        running.stop()
    assert b"ahead" not in ran
    [record] = _outcomes(caplog, "cancelled")
    assert record.alkstore_job_id == ahead and "claimed ahead, not run" in record.getMessage()
