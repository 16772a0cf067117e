"""Migration 0012 (flow control, F1-F3) on a store in use: live jobs, dead jobs and
pauses stay, up and down; limits and groups work after it."""

from __future__ import annotations

from alembic import command
from sqlalchemy import URL, create_engine, text

from alkstore_sa import EnqueueOpts, Limits, Store
from alkstore_sa.migrations._config import alembic_config

from .test_migrations import _every_job, connect

BEFORE = "alkstore_0011_completed_jobs"


def _pauses(url: URL) -> list[tuple[str, object]]:
    with connect(url) as conn:
        rows = conn.execute(text("SELECT queue, paused_at FROM alkstore.paused_queues ORDER BY 1"))
        return [tuple(r) for r in rows]


def test_f1_flow_control_revision_keeps_jobs_and_pauses_up_and_down(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, priority) SELECT 'm', '\\x01',"
                " statement_timestamp() - g * interval '1 s', 5, interval '30 s', g % 3"
                " FROM generate_series(1, 10) AS g"
            )
        )
        conn.execute(text("INSERT INTO alkstore.paused_queues (queue) VALUES ('held')"))
        conn.commit()
    jobs_before, pauses_before = _every_job(blank_database), _pauses(blank_database)
    command.upgrade(cfg, "head")
    after = _every_job(blank_database)
    for table, rows in jobs_before.items():  # every row as it was, with no group
        assert [{k: v for k, v in r.items() if k != "grp"} for r in after[table]] == rows
    assert _pauses(blank_database) == pauses_before
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            assert store.queue("held").stats().paused is True
            assert store.queue("held").claim_one("w") is None
            q = store.queue("m")
            [h] = q.claim_batch("w", 1)
            assert h.job.group is None and h.ack() is True
            q.set_limits(Limits(concurrency=2, group_concurrency=1))
            q.enqueue_many([b"g1", b"g2"], EnqueueOpts(group="g", priority=9))
            got = q.claim_batch("w", 5)
            assert [j.job.group for j in got] == ["g", None]  # one of g, then the queue's limit
            store.queue("limited-only").set_limits(Limits(concurrency=1))
            command.downgrade(cfg, BEFORE)
            assert _pauses(blank_database) == pauses_before  # the limits-only row is gone
            with connect(blank_database) as conn:
                parked = conn.execute(
                    text("SELECT count(*) FROM alkstore.jobs WHERE parked")
                ).scalar_one()
                live = conn.execute(text("SELECT count(*) FROM alkstore.jobs")).scalar_one()
            assert parked == 0  # the row parked for its group is claimable again
            assert live == 11
            command.upgrade(cfg, "head")
            assert _pauses(blank_database) == pauses_before
            assert q.limits() is None
    finally:
        eng.dispose()
