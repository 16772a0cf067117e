"""0013 (workflows, G1-G3) on a store in use: live jobs stay, up and down."""

from __future__ import annotations

from alembic import command
from sqlalchemy import URL, create_engine, text

from alkstore_sa import Store, Workflow
from alkstore_sa.migrations._config import alembic_config

from .test_migrations import _every_job, connect

BEFORE = "alkstore_0012_flow_control"


def test_g_workflows_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
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
        conn.commit()
    before = _every_job(blank_database)
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            old = store.queue("m")
            [h] = old.claim_batch("w", 1)
            assert h.job.workflow_id is None  # jobs from before the upgrade: no workflow
            assert h.ack() is True
            wf = Workflow(store, name="m")
            a = wf.add_job(store.queue("n"), b"a")
            wf.add_job(store.queue("n"), b"b", after=[a])
            run = wf.defer()
            assert store.workflow(run.id).waiting == 1
            live = _every_job(blank_database)
            command.downgrade(cfg, BEFORE)
            # The way down: the waiting step goes with its tables; live rows stay.
            assert _every_job(blank_database) == live
            with connect(blank_database) as conn:
                gone = conn.execute(text("SELECT to_regclass('alkstore.workflow_steps')"))
                assert gone.scalar_one() is None
            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == live
            [root] = store.queue("n").claim_batch("w", 1)  # an ordinary job now
            assert root.job.workflow_id is None and root.ack() is True
            assert len(old.claim_batch("w", 20)) == 9
    finally:
        eng.dispose()
