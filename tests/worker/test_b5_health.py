"""B5: worker health, a missing schema at start, database errors mid-run, stuck handlers.

The backoff's arithmetic (doubling, the 30 s cap, wakes not cutting it
short) is pinned on the fake clock in ``test_worker_timing.py``; here the
real workers meet a real database.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from alembic import command
from sqlalchemy import URL, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Job, SchemaMissingError, Store, Worker
from alkstore_sa.migrations._config import alembic_config

from .._workers import KINDS, handler, start_worker, wait_for, worker_class


def _run_directly(kind: str, url: URL) -> float:
    """Build a worker on ``url`` and run it in this thread; how long run() took to raise."""
    began = time.monotonic()
    if kind == "sync":
        engine = create_engine(url)
        try:
            with pytest.raises(SchemaMissingError) as raised:
                Worker({Store(engine).queue("q"): lambda job: None}, poll_interval=0.05).run()
        finally:
            engine.dispose()
    else:

        async def main() -> None:
            aengine = create_async_engine(url)
            try:

                async def noop(job: Job) -> None:
                    return None

                worker = AsyncWorker({AsyncStore(aengine).queue("q"): noop}, poll_interval=0.05)
                await worker.run()
            finally:
                await aengine.dispose()

        with pytest.raises(SchemaMissingError) as raised:
            asyncio.run(main())
    assert "alkstore migrate" in str(raised.value)
    return time.monotonic() - began


@pytest.mark.parametrize("kind", KINDS)
def test_b5_run_raises_schema_missing_at_once(kind: str, blank_database: URL) -> None:
    assert _run_directly(kind, blank_database) < 5.0  # at once: no poll loop first


@pytest.mark.parametrize("kind", KINDS)
def test_b5_run_raises_schema_missing_when_the_schema_is_behind(
    kind: str, blank_database: URL
) -> None:
    """Tables from an older revision (no 0003 columns) are refused as clearly."""
    command.upgrade(alembic_config(url=blank_database), "alkstore_0002")
    _run_directly(kind, blank_database)


@pytest.mark.parametrize("kind", KINDS)
def test_b5_health_before_during_and_after_a_run(
    kind: str, database_url: URL, store: Store
) -> None:
    started, release = threading.Event(), threading.Event()

    def hold(job: Job) -> None:
        started.set()
        release.wait(10)

    if kind == "async":

        async def ahold(job: Job) -> None:
            started.set()
            while not release.is_set():
                await asyncio.sleep(0.01)

        fn: Any = ahold
    else:
        fn = hold
    running = start_worker(
        kind, database_url, lambda s: worker_class(kind)({s.queue("h"): fn}, poll_interval=0.05)
    )
    try:
        worker = running.worker
        wait_for(lambda: worker.health().listener_connected and worker.health().last_claim_at)
        idle = worker.health()
        assert (idle.running, idle.busy, idle.stuck, idle.db_errors) == (True, 0, 0, 0)
        assert idle.healthy
        store.queue("h").enqueue(b"x")
        assert started.wait(5)
        assert worker.health().busy == 1
        first = worker.health().last_claim_at
        assert first is not None
        wait_for(lambda: worker.health().last_claim_at > first)  # re-polls renew it
        release.set()
        wait_for(lambda: worker.health().busy == 0)
    finally:
        release.set()
        running.stop()
    after = running.worker.health()
    assert not after.running and not after.healthy


def test_b5_health_of_a_worker_that_never_ran(store: Store) -> None:
    health = Worker({store.queue("h"): lambda job: None}).health()
    assert health == (False, 0, 0, None, False, 0)
    assert not health.healthy


@pytest.mark.parametrize("kind", KINDS)
def test_b5_tables_dropped_mid_run_back_off_with_logs_and_recover(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    done: list[int] = []
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("drop"): handler(kind, lambda job: done.append(job.id))},
            poll_interval=0.05,
            sweep_interval=None,
        ),
    )
    try:
        worker = running.worker
        wait_for(lambda: worker.health().last_claim_at is not None)
        with store.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA alkstore CASCADE"))
        wait_for(lambda: worker.health().db_errors >= 3)
        assert not worker.health().healthy
        time.sleep(0.5)
        failures = [r for r in caplog.records if r.getMessage().startswith("claim on drop failed")]
        # 0.05, 0.1, 0.2, 0.4 s between tries: a handful in ~1 s, never a busy loop.
        assert 3 <= len(failures) <= 7
        assert all(r.levelno == logging.WARNING for r in failures)
        assert "next try in" in failures[-1].getMessage()
        assert "alkstore migrate" in failures[-1].getMessage()  # it says what is wrong
        command.upgrade(alembic_config(url=database_url), "head")
        job_id = store.queue("drop").enqueue(b"back")
        wait_for(lambda: job_id in done)
        assert worker.health().db_errors == 0
        assert any(r.getMessage().startswith("claims on drop work again") for r in caplog.records)
    finally:
        running.stop()


def test_b5_a_stuck_sync_handler_is_counted_and_logged_once_per_job_timeout(
    database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="alkstore_sa.worker")
    started, release = threading.Event(), threading.Event()

    def hang(job: Job) -> None:
        started.set()
        release.wait(10)

    job_id = store.queue("stuck").enqueue(b"x")
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker({s.queue("stuck"): hang}, poll_interval=0.05, job_timeout=0.2),
    )
    try:
        worker = running.worker
        assert started.wait(5)
        wait_for(lambda: worker.health().stuck == 1)
        assert not worker.health().healthy
        time.sleep(0.5)  # timed out at 0.2 s; still running at 0.4 and 0.6 s
        still = [r for r in caplog.records if "still running" in r.getMessage()]
        assert 2 <= len(still) <= 3
        assert still[0].getMessage() == (
            f"job {job_id} on stuck: its handler is still running 0.2s after it timed out "
            "(its slot stays taken until it returns)"
        )
        release.set()
        wait_for(lambda: worker.health().stuck == 0)
        assert worker.health().healthy
    finally:
        release.set()
        running.stop()
