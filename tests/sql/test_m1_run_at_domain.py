"""Migration 0017: run_at's range moves from jobs_run_at_ck onto the loadable_time domain.

The same rows must be refused and allowed as at 0016 -- on insert and on
update, for every time column and every other domain column --, every
live and dead job kept up and down without rewriting the table, and the
way down must restore 0016's table check as it was.
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import URL

from alkstore_sa.migrations._config import alembic_config

from .test_m1_compact_checks import _checks, _tree_size
from .test_m1_domain_checks import DOMAIN_COLUMNS, _domains, _filenode, _verdicts, in_use_at
from .test_m1_row_checks import _every_job
from .test_migrations import connect

BEFORE = "alkstore_0016_claim_index_parked"
REVISION = "alkstore_0017_run_at_domain"


def test_m1_run_at_domain_refuses_and_allows_exactly_what_0016_did(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    before = _verdicts(blank_database)
    command.upgrade(cfg, REVISION)
    after = _verdicts(blank_database)
    assert after == before
    # run_at's own edges: both infinities and a microsecond past either bound
    # refused (23514) on insert and on update, NULL refused as NOT NULL.
    refused = {value: state for (column, value, _), state in after.items() if column == "run_at"}
    assert set(refused.values()) == {None, "23502", "23514"}


def test_m1_run_at_domain_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    table_checks, tree, filenode, jobs = in_use_at(cfg, blank_database, BEFORE)

    command.upgrade(cfg, REVISION)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert _domains(conn) == {**DOMAIN_COLUMNS, "run_at": "loadable_time"}
        assert _filenode(conn) == filenode  # moved onto the domain, not rewritten
        assert set(_checks(conn)) == set(table_checks) - {"jobs_run_at_ck"}
        assert _tree_size(conn, "jobs") < 0.85 * tree

    command.downgrade(cfg, BEFORE)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert _checks(conn) == table_checks
        assert _domains(conn) == DOMAIN_COLUMNS
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == jobs
