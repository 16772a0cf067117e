"""The worker's vacuum of the jobs table (L2).

Autovacuum looks once per ``autovacuum_naptime``; a worker whose role owns
the jobs table VACUUMs it itself once dead row versions pile up, one worker
at a time.  Dead versions are made by claiming and acking jobs on one
connection, whose statistics are then flushed (``pg_stat_force_next_flush``)
so the counts are read as the server has them, not a second later.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.dialects import postgresql

from alkstore_sa import Store, Worker
from alkstore_sa._db.sql import vacuum as vacuum_sql
from alkstore_sa._db.sql.vacuum import jobs_table
from alkstore_sa._db.vacuum import VACUUM_LOCK_CLASS
from alkstore_sa.store import queue_parts, run_call

from .._workers import wait_for

VACUUMS = text(
    "SELECT vacuum_count FROM pg_stat_user_tables"
    " WHERE schemaname = 'alkstore' AND relname = 'jobs'"
)


def _vacuums(engine: Engine) -> int:
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(conn.execute(VACUUMS).scalar_one())


def _churn(engine: Engine, jobs: int) -> None:
    """``jobs`` jobs enqueued, claimed and acked: two dead row versions each.

    Autovacuum is switched off for this database's jobs table first: on a
    loaded machine it could vacuum the churn away between here and the
    worker's look, which would then rightly find nothing to do.
    """
    with engine.connect() as conn:
        conn.execute(text("ALTER TABLE alkstore.jobs SET (autovacuum_enabled = false)"))
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout) SELECT 'churn', '\\x00', now(), 5, interval '30 s'"
                " FROM generate_series(1, :n)"
            ),
            {"n": jobs},
        )
        conn.execute(
            text(
                "UPDATE alkstore.jobs SET status = 'processing', worker_id = 'w',"
                " claim_deadline = now() + interval '30 s', attempts = 1"
            )
        )
        conn.execute(text("DELETE FROM alkstore.jobs"))
        conn.commit()
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
        conn.commit()
    with engine.connect() as conn:  # the flush happens when that session goes idle
        for _ in range(100):
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            dead = conn.execute(
                text(
                    "SELECT n_dead_tup FROM pg_stat_user_tables"
                    " WHERE schemaname = 'alkstore' AND relname = 'jobs'"
                )
            ).scalar_one()
            if dead >= 2 * jobs:
                return
            time.sleep(0.05)
    raise AssertionError(f"the statistics show {dead} dead versions, not {2 * jobs}")


def _look(store: Store, min_dead: int, live_fraction: float = 0.0) -> Any:
    _, core = queue_parts(store.queue("churn"))
    return run_call(store, core.vacuum_jobs(min_dead, live_fraction))


def test_vacuum_runs_once_dead_versions_pass_the_threshold(engine: Engine) -> None:
    _churn(engine, 500)
    before = _vacuums(engine)
    with Store(engine) as store:
        assert _look(store, min_dead=5_000) == "not needed"
        assert _vacuums(engine) == before
        assert _look(store, min_dead=500) == "vacuumed"
    assert _vacuums(engine) == before + 1


def test_vacuum_counts_live_rows_into_the_threshold(engine: Engine) -> None:
    _churn(engine, 500)
    with Store(engine) as store:
        store.queue("big").enqueue_many([b"x"] * 3_000)
        with engine.connect() as conn:
            conn.execute(text("ANALYZE alkstore.jobs"))  # n_live_tup, now
            conn.commit()
        assert _look(store, min_dead=100, live_fraction=1.0) == "not needed"
        assert _look(store, min_dead=100, live_fraction=0.1) == "vacuumed"


def test_vacuum_is_one_worker_at_a_time(engine: Engine) -> None:
    _churn(engine, 500)
    table = jobs_table(engine.dialect, "alkstore")
    with Store(engine) as store, engine.connect() as other:
        other.execute(
            text("SELECT pg_advisory_lock(:c, hashtext(:t))"), {"c": VACUUM_LOCK_CLASS, "t": table}
        )
        assert _look(store, min_dead=500) == "busy"
        other.execute(
            text("SELECT pg_advisory_unlock(:c, hashtext(:t))"),
            {"c": VACUUM_LOCK_CLASS, "t": table},
        )
        assert _look(store, min_dead=500) == "vacuumed"


def test_vacuum_statement_names_the_store_schema_quoted() -> None:
    assert jobs_table(postgresql.dialect(), "Odd Schema") == '"Odd Schema".jobs'
    assert vacuum_sql.vacuum('"Odd Schema".jobs').text == 'VACUUM "Odd Schema".jobs'


@pytest.mark.parametrize("interval", [0.05, None])
def test_worker_vacuums_its_jobs_table_unless_told_not_to(
    engine: Engine, interval: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    _churn(engine, 2_500)  # past the worker's threshold (2,000 + a fifth of the live rows)
    before = _vacuums(engine)
    with Store(engine) as store:
        worker = Worker(
            {store.queue("idle"): lambda job: None},
            poll_interval=0.05,
            vacuum_interval=interval,
            sweep_interval=None,
            handle_signals=False,
        )
        thread = threading.Thread(target=worker.run)
        with caplog.at_level(logging.DEBUG, logger="alkstore_sa.worker"):
            thread.start()
            try:
                if interval is None:
                    time.sleep(0.5)
                    assert _vacuums(engine) == before
                else:
                    # Both: the server counted it and the worker logged it (the
                    # count can land before the log line, and a stop between
                    # the two would cancel the line).
                    wait_for(
                        lambda: (
                            _vacuums(engine) > before
                            and any(
                                r.getMessage() == "vacuumed alkstore.jobs" for r in caplog.records
                            )
                        ),
                        timeout=10,
                    )
            finally:
                worker.stop()
                thread.join(10)
    vacuumed = [r for r in caplog.records if r.getMessage() == "vacuumed alkstore.jobs"]
    assert bool(vacuumed) is (interval is not None)


async def test_vacuum_through_the_async_store(engine: Engine, async_engine: Any) -> None:
    """The AsyncWorker's path: the async store's autocommit connection."""
    from alkstore_sa import AsyncStore
    from alkstore_sa.aio import queue_parts as async_parts
    from alkstore_sa.aio import run_call as async_run_call

    _churn(engine, 500)
    before = _vacuums(engine)
    store = AsyncStore(async_engine)
    _, core = async_parts(store.queue("churn"))
    assert await async_run_call(store, core.vacuum_jobs(500, 0.0)) == "vacuumed"
    assert _vacuums(engine) == before + 1
