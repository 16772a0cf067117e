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
    command.upgrade(cfg, "alkstore_0003")
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("live")
            q.enqueue_many([b"a", b"b", b"c"])
            assert q.claim_one("w") is not None
            tables, before = _state(blank_database)
            assert "periodic" not in tables and len(before) == 3

            command.upgrade(cfg, "head")
            tables, after = _state(blank_database)
            assert "periodic" in tables and after == before
            p = Periodic("p", "@hourly", q)
            assert store._run(p.fire_call(), atomic=True).job_id is None  # first sight: a row

            command.downgrade(cfg, "alkstore_0003")
            tables, down = _state(blank_database)
            assert "periodic" not in tables and down == before
            command.upgrade(cfg, "head")
            assert _state(blank_database)[1] == before
    finally:
        eng.dispose()
