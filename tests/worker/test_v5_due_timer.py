"""V5: a worker keeps a timer for the next due time it knows of (its own retries).

A job it retries with a delay is claimed when it comes due, not a
``poll_interval`` later: on the fake clock to the (virtual) millisecond,
and against PostgreSQL within 50 ms (p50) of the ``run_at`` the retry set,
with a poll interval of 30 s that could not explain it.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import pytest
from sqlalchemy import URL, Engine, text

from alkstore_sa import Job, RetryJob, Store
from alkstore_sa.worker._supervisor import Supervisor

from .. import _fakeclock
from .._fakebackend import FakeBackend, FakeDB, bind, run_for, settings
from .._workers import KINDS, handler, start_worker, wait_for, worker_class


def _run(coro: Any) -> None:
    _fakeclock.run(coro)


def test_v5_a_retry_is_claimed_when_due_not_at_the_next_poll() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)

        async def later_once(job: Job) -> None:
            await asyncio.sleep(0.5)
            if job.attempts == 1:
                raise RetryJob("later", delay=7)

        sup = Supervisor(settings(poll_interval=60.0))
        await run_for(sup, [bind(db, later_once)], FakeBackend(listen_after=0.0), stop_at=9.0)
        # Claimed at start, then when the retry came due (0.5 + 7), not at the 60 s poll.
        assert db.times("claim")[:2] == [0.0, 7.5]
        assert db.times("ack") == [8.0]

    _run(scenario())


def test_v5_the_earliest_of_several_due_times_wins() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        first, second = db.enqueue(notify=False), db.enqueue(notify=False)
        delays = {first: 5, second: 2}

        async def retry_once(job: Job) -> None:
            if job.attempts == 1:
                raise RetryJob("later", delay=delays[job.id])

        sup = Supervisor(settings(poll_interval=60.0))
        await run_for(sup, [bind(db, retry_once)], FakeBackend(listen_after=0.0), stop_at=6.0)
        claims = db.times("claim")
        assert 2.0 in claims and 5.0 in claims and not [t for t in claims if 0.0 < t < 2.0]
        assert not db.rows  # both acked before the stop

    _run(scenario())


@pytest.fixture
def starts(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS v5_starts "
                "(job_id bigint, started timestamptz, due timestamptz)"
            )
        )
        conn.execute(text("TRUNCATE v5_starts"))
    return engine


@pytest.mark.parametrize("kind", KINDS)
def test_v5_a_retried_job_starts_within_50ms_of_its_run_at(
    kind: str, database_url: URL, store: Store, starts: Engine
) -> None:
    jobs = 6

    def retry_then_record(job: Job) -> None:
        if job.attempts == 1:
            raise RetryJob("later", delay=0.4)
        with starts.begin() as conn:
            conn.execute(
                text("INSERT INTO v5_starts VALUES (:id, clock_timestamp(), :due)"),
                {"id": job.id, "due": job.run_at},
            )

    ids = [store.queue("v5").enqueue(b"x") for _ in range(jobs)]
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("v5"): handler(kind, retry_then_record)}, poll_interval=30.0
        ),
    )
    try:
        wait_for(lambda: all(store.queue("v5").get_job(i) is None for i in ids), timeout=20)
    finally:
        running.stop()
    with starts.connect() as conn:
        lateness = [
            float(row[0])
            for row in conn.execute(text("SELECT extract(epoch FROM started - due) FROM v5_starts"))
        ]
    assert len(lateness) == jobs
    assert min(lateness) >= 0  # never claimed before its run_at
    assert statistics.median(lateness) < 0.05, lateness
