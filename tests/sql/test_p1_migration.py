"""P1's revision (alkstore_0005_periodic): adds ``periodic``, keeps every job, up and down."""

from __future__ import annotations

from alembic import command
from sqlalchemy import URL, create_engine, text

from alkstore_sa import Periodic, Store
from alkstore_sa.migrations._config import alembic_config


def _state(url: URL) -> tuple[set[str], list[tuple[int, str, str]]]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            tables = set(
                conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'alkstore'")
                ).scalars()
            )
            jobs = [
                (r[0], r[1], r[2])
                for r in conn.execute(
                    text("SELECT id, queue, status FROM alkstore.jobs ORDER BY id")
                )
            ]
        return tables, jobs
    finally:
        eng.dispose()


def test_p1_revision_adds_the_periodic_table_and_keeps_jobs(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0004_unique_keys")
    eng = create_engine(blank_database)
    try:
        # Jobs as the package left them at the revision before (SQL: the
        # package's own statements read columns of later revisions).
        with eng.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                    " visibility_timeout, status, attempts, worker_id, claim_deadline)"
                    " VALUES ('live', '\\x61', now(), 5, interval '30 s', 'processing', 1, 'w',"
                    " now() + interval '30 s'),"
                    " ('live', '\\x62', now(), 5, interval '30 s', 'pending', 0, NULL, NULL),"
                    " ('live', '\\x63', now(), 5, interval '30 s', 'pending', 0, NULL, NULL)"
                )
            )
        with Store(eng) as store:
            q = store.queue("live")
            tables, before = _state(blank_database)
            assert "periodic" not in tables and len(before) == 3

            command.upgrade(cfg, "head")
            tables, after = _state(blank_database)
            assert "periodic" in tables and after == before
            p = Periodic("p", "@hourly", q)
            assert store._run(p.fire_call(), atomic=True).job_id is None  # first sight: a row

            command.downgrade(cfg, "alkstore_0004_unique_keys")
            tables, down = _state(blank_database)
            assert "periodic" not in tables and down == before
            command.upgrade(cfg, "head")
            assert _state(blank_database)[1] == before
    finally:
        eng.dispose()
