"""W2's throughput: Workers count what became of each job (acked / retried / dead) per queue
and minute, in the ``throughput`` table (revision 0006), read by the dashboard's chart."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import URL, Engine, create_engine, text

from alkstore_sa import FailJob, QueueOpts, RetryJob, Store
from alkstore_sa.migrations._config import alembic_config
from alkstore_sa.schema import DEFAULT_SCHEMA
from alkstore_sa.store import queue_parts, run_call

from .._web import web_client
from .._workers import KINDS, handler, start_worker, wait_for, worker_class
from ..sql.test_migrations import connect, tables_in


def _counts(engine: Engine, queue: str) -> tuple[int, int, int]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT coalesce(sum(acked), 0), coalesce(sum(retried), 0), "
                "coalesce(sum(dead), 0) FROM alkstore.throughput WHERE queue = :q"
            ),
            {"q": queue},
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


@pytest.mark.parametrize("kind", KINDS)
def test_w2_workers_count_acked_retried_and_dead_per_minute(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    q = store.queue("tp", QueueOpts(max_attempts=2))
    q.enqueue_many([b"ok"] * 5 + [b"retry"] * 2 + [b"fail"] * 3)

    def run(job: Any) -> None:
        if job.payload == b"retry":
            raise RetryJob("again", delay=0)  # retried once, then dead (max_attempts=2)
        if job.payload == b"fail":
            raise FailJob("no")

    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("tp", QueueOpts(max_attempts=2)): handler(kind, run)},
            concurrency=4,
            poll_interval=0.1,
        ),
    )
    try:
        wait_for(lambda: q.stats().due == 0 and q.stats().processing == 0 and q.stats().dead == 5)
        # Flushed about once a second while running ...
        wait_for(lambda: _counts(engine, "tp") == (5, 2, 5), timeout=5)
    finally:
        running.stop()
    assert running.error is None
    with engine.connect() as conn:
        minutes = (
            conn.execute(text("SELECT minute FROM alkstore.throughput WHERE queue = 'tp'"))
            .scalars()
            .all()
        )
    assert all(m.second == 0 and m.microsecond == 0 for m in minutes)


def test_w2_dashboard_shows_the_last_hour_of_throughput(
    engine: Engine, database_url: URL, store: Store
) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.throughput (queue, minute, acked, retried, dead) VALUES "
                "('shown', date_trunc('minute', now()), 7, 3, 1), "
                "('shown', date_trunc('minute', now()) - interval '30 minutes', 5, 0, 0), "
                "('shown', date_trunc('minute', now()) - interval '2 hours', 1000, 0, 0)"
            )
        )
    store.queue("shown").enqueue(b"x")
    with web_client("sync", engine, database_url) as client:
        page = client.get("/queues/shown").text
        assert 'acked <b class="num">12</b>' in page  # the 2-hour-old minute is out
        assert 'retried <b class="num">3</b>' in page and 'dead <b class="num">1</b>' in page
        assert 'acked <b class="num">12</b>' in client.get("/").text


def test_w2_recording_prunes_minutes_older_than_two_hours(engine: Engine, store: Store) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.throughput (queue, minute, acked) VALUES "
                "('old', now() - interval '3 hours', 9), ('other', now() - interval '3 hours', 9)"
            )
        )
    s, core = queue_parts(store.queue("old"))
    run_call(s, core.record_outcomes(1, 2, 3))
    run_call(s, core.record_outcomes(1, 0, 0))
    assert _counts(engine, "old") == (2, 2, 3)  # the 3-hour-old row went
    assert _counts(engine, "other") == (9, 0, 0)  # another queue's rows are its own


def _pending(eng: Engine) -> int:
    with eng.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM alkstore.jobs WHERE queue = 'm'"))
        return int(count.scalar_one())


def test_w2_migration_0006_up_and_down_keeps_every_job(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0003")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, "
                "visibility_timeout) SELECT 'm', '\\x00'::bytea, now(), 5, interval '30 s' "
                "FROM generate_series(1, 20)"
            )
        )
        conn.commit()
    command.upgrade(cfg, "alkstore_0006_throughput")
    assert "throughput" in tables_in(blank_database, DEFAULT_SCHEMA)
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            s, core = queue_parts(store.queue("m"))
            run_call(s, core.record_outcomes(1, 0, 0))
            # Counted in SQL: today's stats() reads tables of later revisions (R1).
            assert _pending(eng) == 20
            command.downgrade(cfg, "alkstore_0003")
            assert "throughput" not in tables_in(blank_database, DEFAULT_SCHEMA)
            assert _pending(eng) == 20
            command.upgrade(cfg, "head")
            assert store.queue("m").stats().due == 20
    finally:
        eng.dispose()


def test_w2_pages_work_before_revision_0006_and_say_what_is_missing(
    engine: Engine, database_url: URL, store: Store
) -> None:
    store.queue("old-schema").enqueue(b"x")
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alkstore.throughput"))
    with web_client("sync", engine, database_url) as client:
        for path in ("/", "/queues/old-schema"):
            page = client.get(path)
            assert page.status_code == 200
            assert "run <code>alkstore migrate</code> (revision 0006)" in page.text
