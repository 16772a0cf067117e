"""Migration 0014: 0009's time and errors checks in fewer nodes, allowing exactly the same rows.

A CHECK's stored tree is read back and planned for every statement that
writes its table, so its size is paid per enqueue and per claim.  The
compact forms must pass and refuse exactly what 0009's did (checked over
every combination of edge values), keep every live and dead job up and
down, and the way down must restore 0009's constraints as they were.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, text
from sqlalchemy.exc import IntegrityError

from alkstore_sa.migrations._config import alembic_config

from .test_m1_row_checks import _every_job
from .test_migrations import connect

BEFORE = "alkstore_0013_workflows"
REVISION = "alkstore_0014_compact_checks"

# Edge values of a time column: outside, on and inside each bound, and NULL.
SAMPLES = (
    "NULL",
    "'-infinity'",
    "'0001-01-01 23:59:59.999999+00'",
    "'0001-01-02 00:00:00+00'",
    "'2026-12-05 12:00:00+00'",
    "'9999-12-30 00:00:00+00'",
    "'9999-12-30 00:00:00.000001+00'",
    "'infinity'",
)


def _revision(url: URL) -> ModuleType:
    script = ScriptDirectory.from_config(alembic_config(url=url))
    found = script.get_revision(REVISION)
    assert found is not None
    return found.module


def _checks(conn: Connection) -> dict[str, Any]:
    rows = conn.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'c' AND connamespace = 'alkstore'::regnamespace"
        )
    )
    return {name: definition for name, definition in rows}


def _tree_size(conn: Connection, table: str) -> int:
    return int(
        conn.execute(
            text(
                "SELECT sum(length(conbin::text)) FROM pg_constraint"
                " WHERE contype = 'c' AND conrelid = CAST(:t AS regclass)"
            ),
            {"t": f"alkstore.{table}"},
        ).scalar_one()
    )


def test_m1_compact_checks_pass_exactly_the_rows_0009s_passed(blank_database: URL) -> None:
    """Every combination of edge values over five time columns, both spellings side by side
    (a CHECK passes unless its condition is false), and errors of every JSON type."""
    migration = _revision(blank_database)
    columns = ("a", "b", "c", "d", "e")
    old = migration._spelled_out_times(columns, 2)
    new = migration.compact_times(columns)
    values = ", ".join(f"({v}::timestamptz)" for v in SAMPLES)
    grid = " CROSS JOIN ".join(f"(VALUES {values}) AS {c}_({c})" for c in columns)
    required = "a IS NOT NULL AND b IS NOT NULL"  # NOT NULL columns in both tables
    errors = migration.SPELLED_OUT_ERRORS, migration.COMPACT_ERRORS
    with connect(blank_database) as conn:
        compared, differ = conn.execute(
            text(
                f"SELECT count(*), count(*) FILTER (WHERE"
                f" (({old}) IS NOT FALSE) IS DISTINCT FROM (({new}) IS NOT FALSE))"
                f" FROM {grid} WHERE {required}"
            )
        ).one()
        assert compared == 7**2 * 8**3 and differ == 0
        verdicts = conn.execute(
            text(
                f"SELECT ({errors[0]}) IS NOT FALSE, ({errors[1]}) IS NOT FALSE FROM (VALUES"
                " (NULL::jsonb), ('[]'), ('[1]'), ('{}'), ('\"x\"'), ('1'), ('null'), ('true'))"
                " AS v(errors)"
            )
        ).all()
        assert all(was == now for was, now in verdicts)
        assert [now for _, now in verdicts] == [True, True, True] + [False] * 5


def _live_rows(conn: Connection) -> None:
    conn.execute(
        text(
            "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout,"
            " status, attempts, worker_id, claim_deadline, deadline_floor, expires_at, errors)"
            " VALUES ('live', '\\x61', now(), 5, '30 s', 'processing', 1, 'w',"
            " now() + interval '30 s', now() + interval '30 s', NULL, '[{\"error\": \"e\"}]'),"
            " ('live', '\\x62', '0001-01-02 00:00:00+00', 5, '30 s', 'pending', 0, NULL, NULL,"
            " NULL, '9999-12-30 00:00:00+00', NULL)"
        )
    )
    conn.execute(
        text(
            "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
            " max_attempts, visibility_timeout, created_at, died_at, errors, last_error)"
            " VALUES (-1, 'live', '\\x63', 0, now(), 5, 5, '30 s', now(), now(), '[]', 'boom')"
        )
    )


# (table, column, a value its check refuses)
REFUSED = (
    ("jobs", "run_at", "'-infinity'"),
    ("jobs", "created_at", "'infinity'"),
    ("jobs", "expires_at", "'9999-12-30 00:00:00.000001+00'"),
    ("jobs", "deadline_floor", "'-infinity'"),
    ("jobs", "errors", "'{}'"),
    ("dead_jobs", "died_at", "'infinity'"),
    ("dead_jobs", "claim_deadline", "'0001-01-01 00:00:00+00'"),
    ("dead_jobs", "errors", "'\"x\"'"),
)
# A row each table accepts, column by column.
ACCEPTED = {
    "jobs": {
        "queue": "'q'",
        "payload": "'\\x00'",
        "run_at": "now()",
        "max_attempts": "3",
        "visibility_timeout": "'30 s'",
    },
    "dead_jobs": {
        "id": "-2",
        "queue": "'q'",
        "payload": "'\\x00'",
        "priority": "0",
        "run_at": "now()",
        "attempts": "1",
        "max_attempts": "3",
        "visibility_timeout": "'30 s'",
        "created_at": "now()",
        "died_at": "now()",
    },
}


def test_m1_compact_checks_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    with connect(blank_database) as conn:
        _live_rows(conn)
        conn.commit()
        spelled_out = _checks(conn)
        sizes = {t: _tree_size(conn, t) for t in ("jobs", "dead_jobs")}
    before = _every_job(blank_database)

    command.upgrade(cfg, REVISION)
    assert _every_job(blank_database) == before
    with connect(blank_database) as conn:
        for table, column, value in REFUSED:
            row = {**ACCEPTED[table], column: value}
            names, values = ", ".join(row), ", ".join(row.values())
            insert = f"INSERT INTO alkstore.{table} ({names}) VALUES ({values})"
            with pytest.raises(IntegrityError, match=f"{table}_(times|errors)_ck"):
                conn.execute(text(insert))
            conn.rollback()
        assert _tree_size(conn, "jobs") < 0.75 * sizes["jobs"]
        assert _tree_size(conn, "dead_jobs") < 0.75 * sizes["dead_jobs"]

    command.downgrade(cfg, BEFORE)
    assert _every_job(blank_database) == before
    with connect(blank_database) as conn:
        assert _checks(conn) == spelled_out
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
