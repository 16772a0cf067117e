"""Migration 0015: jobs' single-column checks on domains, allowing exactly the same rows.

A table's checks are read back and planned for every statement that writes
the table; a domain's only when a value is assigned to its column, and
planned once per connection.  Moved, the checks must still refuse and allow
exactly what 0014's did -- on insert and on update, for every writer --,
keep every live and dead job up and down without rewriting the table, and
the way down must restore 0014's constraints as they were.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Connection, text
from sqlalchemy.exc import DBAPIError

from alkstore_sa.migrations._config import alembic_config

from .test_m1_compact_checks import SAMPLES, _checks, _live_rows, _tree_size
from .test_m1_row_checks import _every_job
from .test_migrations import connect

BEFORE = "alkstore_0014_compact_checks"
REVISION = "alkstore_0015_domain_checks"

TIMES = ("run_at", "created_at", "expires_at", "claim_deadline", "deadline_floor")
# Edge values of each moved column (and run_at, whose check stays on the table).
EDGES: dict[str, tuple[str, ...]] = {
    **{column: SAMPLES for column in TIMES},
    "visibility_timeout": (
        "NULL",
        "'-1 second'",
        "'0 seconds'",
        "'1 microsecond'",
        "'1000000000 seconds'",
        "'1000000000.000001 seconds'",
    ),
    "errors": ("NULL", "'[]'", "'[1]'", "'{}'", "'\"x\"'", "'1'", "'null'", "'true'"),
}
# What the table needs besides the column under test.
ROW = {
    "queue": "'q'",
    "payload": "'\\x00'",
    "run_at": "now()",
    "max_attempts": "3",
    "visibility_timeout": "'30 s'",
}
DOMAIN_COLUMNS = {
    "created_at": "loadable_time",
    "expires_at": "loadable_time",
    "claim_deadline": "loadable_time",
    "deadline_floor": "loadable_time",
    "visibility_timeout": "visibility_timeout",
    "errors": "error_history",
}


def _sqlstate(conn: Connection, statement: str) -> str | None:
    """None when ``statement`` ran, else its SQLSTATE (rolled back either way)."""
    try:
        conn.execute(text(statement))
        return None
    except DBAPIError as exc:
        return str(getattr(exc.orig, "sqlstate", "?"))
    finally:
        conn.rollback()


def _verdicts(url: URL) -> dict[tuple[str, str, str], str | None]:
    """For each column and edge value: what an INSERT with it, and an UPDATE to it, came to."""
    found: dict[tuple[str, str, str], str | None] = {}
    with connect(url) as conn:
        conn.execute(text("TRUNCATE alkstore.jobs"))
        target = conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout) VALUES ('t', '\\x00', now(), 3, '30 s') RETURNING id"
            )
        ).scalar_one()
        conn.commit()
        for column, values in EDGES.items():
            for value in values:
                row = {**ROW, column: value}
                insert = (
                    f"INSERT INTO alkstore.jobs ({', '.join(row)})"
                    f" VALUES ({', '.join(row.values())})"
                )
                update = f"UPDATE alkstore.jobs SET {column} = {value} WHERE id = {target}"
                found[(column, value, "insert")] = _sqlstate(conn, insert)
                found[(column, value, "update")] = _sqlstate(conn, update)
    return found


def _domains(conn: Connection) -> dict[str, Any]:
    rows = conn.execute(
        text(
            "SELECT column_name, domain_name FROM information_schema.columns"
            " WHERE table_schema = 'alkstore' AND table_name = 'jobs'"
            " AND domain_name IS NOT NULL"
        )
    )
    return {column: domain for column, domain in rows}


def _filenode(conn: Connection) -> int:
    return int(conn.execute(text("SELECT pg_relation_filenode('alkstore.jobs')")).scalar_one())


def test_m1_domain_checks_refuse_and_allow_exactly_what_0014s_checks_did(
    blank_database: URL,
) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    before = _verdicts(blank_database)
    command.upgrade(cfg, REVISION)
    after = _verdicts(blank_database)
    assert after == before
    refused = {key for key, state in after.items() if state is not None}
    # Out-of-range times (infinities and a microsecond past either bound),
    # both visibility-timeout bounds and every non-array error, on insert and
    # on update; NULL only where the column is NOT NULL.
    assert {state for key, state in after.items() if key in refused} == {"23514", "23502"}
    assert len([key for key in refused if after[key] == "23514"]) == 2 * (5 * 4 + 3 + 5)
    assert all(
        after[(c, "NULL", how)] is None
        for c in DOMAIN_COLUMNS
        if c not in ("created_at", "visibility_timeout")
        for how in ("insert", "update")
    )


class InUse(NamedTuple):
    """A store in use at some revision, as a revision test compares it up and down."""

    checks: dict[str, Any]  # every check of the schema, tables' and domains'
    tree: int  # the length of jobs' table checks' stored trees
    filenode: int  # jobs' file: the same unless the table was rewritten
    jobs: dict[str, list[dict[str, Any]]]  # every live and dead job


def in_use_at(cfg: Config, url: URL, revision: str) -> InUse:
    """Migrate to ``revision``, write live and dead jobs, and take their ``InUse``."""
    command.upgrade(cfg, revision)
    with connect(url) as conn:
        _live_rows(conn)
        conn.commit()
        found = (_checks(conn), _tree_size(conn, "jobs"), _filenode(conn))
    return InUse(*found, _every_job(url))


def test_m1_domain_checks_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    table_checks, tree, filenode, jobs = in_use_at(cfg, blank_database, BEFORE)

    command.upgrade(cfg, REVISION)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert _domains(conn) == DOMAIN_COLUMNS
        assert _filenode(conn) == filenode  # moved onto the domains, not rewritten
        # What every statement on jobs reads back: well under two thirds.
        assert _tree_size(conn, "jobs") < 0.65 * tree
        moved = {f"jobs_{n}_ck" for n in ("times", "errors", "visibility_timeout")}
        moved.add("jobs_visibility_timeout_bound_ck")
        added = {"jobs_run_at_ck", "loadable_time_ck", "visibility_timeout_ck", "error_history_ck"}
        assert set(_checks(conn)) == (set(table_checks) - moved) | added

    command.downgrade(cfg, BEFORE)
    assert _every_job(blank_database) == jobs
    with connect(blank_database) as conn:
        assert _checks(conn) == table_checks
        assert _domains(conn) == {}
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == jobs
