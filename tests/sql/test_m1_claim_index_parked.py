"""Migration 0016: jobs_claim_ix keys on (parked, run_at); the generated claim_at goes.

Every live and dead job is kept up and down; a parked row stays parked and
out of every claim on both sides; the way down gives claim_at back with the
value PostgreSQL computes for it (+infinity once parked, else run_at).
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import URL, Connection, text

from alkstore_sa.migrations._config import alembic_config

from .test_m1_compact_checks import _live_rows
from .test_m1_row_checks import _every_job
from .test_migrations import connect

BEFORE = "alkstore_0015_domain_checks"
REVISION = "alkstore_0016_claim_index_parked"


def _claim_index(conn: Connection) -> str:
    found = conn.execute(
        text(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'alkstore'"
            " AND indexname = 'jobs_claim_ix'"
        )
    ).scalar_one()
    return str(found).split(" USING btree ", 1)[1]


def _columns(conn: Connection) -> set[str]:
    rows = conn.execute(
        text(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'alkstore' AND table_name = 'jobs'"
        )
    )
    return {name for (name,) in rows}


def _parked_row(conn: Connection) -> int:
    """An expired pending row, parked as a claim's park step leaves it (S3)."""
    return int(
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, expires_at, parked) VALUES ('live', '\\x64',"
                " now() - interval '1 hour', 5, '30 s', now() - interval '1 minute', true)"
                " RETURNING id"
            )
        ).scalar_one()
    )


def test_m1_claim_index_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    with connect(blank_database) as conn:
        _live_rows(conn)
        parked = _parked_row(conn)
        conn.commit()
    jobs = _every_job(blank_database)

    command.upgrade(cfg, REVISION)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert "claim_at" not in _columns(conn)
        assert _claim_index(conn) == (
            "(queue, priority DESC, parked, run_at, id) WHERE (status = 'pending'::text)"
        )

    command.downgrade(cfg, BEFORE)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert _claim_index(conn) == (
            "(queue, priority DESC, claim_at, id) WHERE (status = 'pending'::text)"
        )
        keys = {
            job_id: same
            for job_id, same in conn.execute(
                text("SELECT id, claim_at = run_at FROM alkstore.jobs")
            )
        }
        assert keys.pop(parked) is False  # +infinity: still out of the claims' range
        assert set(keys.values()) == {True}
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == jobs
