"""alkstore: the time and errors checks in fewer nodes, same rows allowed

Revision ID: alkstore_0014_compact_checks
Revises: alkstore_0013_workflows
Create Date: 2026-12-05

PostgreSQL reads each CHECK constraint's stored expression tree back from
text (and plans it) once per INSERT or UPDATE statement on the table: the
cost of a check grows with its node count, and every enqueue, claim,
heartbeat and retry pays it.  0009's checks spelled every time column out
twice with a ``NULL`` test beside it -- 5,452 characters of stored tree for
``jobs_times_ck`` alone, most of an enqueue's server CPU above the first
release's (docs/benchmarks.md).  The same conditions, shorter:

- times: ``LEAST(...) >= earliest AND GREATEST(...) <= latest`` over the
  table's time columns.  LEAST and GREATEST skip NULLs and never return
  NULL here (``run_at`` is NOT NULL), so a row passes exactly when every
  time it holds is within the range -- 0009's condition;
- errors: ``jsonb_typeof(errors) = 'array'``.  A CHECK passes on NULL, and
  ``jsonb_typeof(NULL)`` is NULL: the explicit ``errors IS NULL OR`` of
  0009 added nodes, not meaning.

Every row that met 0009's checks meets these (and the other way round), so
live jobs stay as they are; each constraint keeps its name and is added
VALID (a scan of its table, under the exclusive lock the drop takes).  The
way down restores 0009's spelling.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0014_compact_checks"
down_revision: str | Sequence[str] | None = "alkstore_0013_workflows"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
TIMES = {
    "jobs": ("run_at", "created_at", "expires_at", "claim_deadline", "deadline_floor"),
    "dead_jobs": ("run_at", "created_at", "died_at", "expires_at", "claim_deadline"),
}
# The columns 0009 required (NOT NULL there); the others it let be NULL.
REQUIRED = {"jobs": 2, "dead_jobs": 3}


def compact_times(columns: Sequence[str]) -> str:
    listed = ", ".join(columns)
    return f"LEAST({listed}) >= {EARLIEST} AND GREATEST({listed}) <= {LATEST}"


COMPACT_ERRORS = "jsonb_typeof(errors) = 'array'"


def _spelled_out_times(columns: Sequence[str], required: int) -> str:
    """0009's form, for the way down."""

    def check(column: str) -> str:
        return f"{column} >= {EARLIEST} AND {column} <= {LATEST}"

    return " AND ".join(
        [f"({check(c)})" for c in columns[:required]]
        + [f"({c} IS NULL OR ({check(c)}))" for c in columns[required:]]
    )


SPELLED_OUT_ERRORS = "errors IS NULL OR jsonb_typeof(errors) = 'array'"


def _replace(schema: str, table: str, name: str, condition: str) -> None:
    constraint = op.f(f"{table}_{name}_ck")
    op.drop_constraint(constraint, table, type_="check", schema=schema)
    op.create_check_constraint(constraint, table, condition, schema=schema)


def upgrade() -> None:
    schema = migration_schema()
    for table, columns in TIMES.items():
        _replace(schema, table, "times", compact_times(columns))
        _replace(schema, table, "errors", COMPACT_ERRORS)


def downgrade() -> None:
    schema = migration_schema()
    for table, columns in TIMES.items():
        _replace(schema, table, "times", _spelled_out_times(columns, REQUIRED[table]))
        _replace(schema, table, "errors", SPELLED_OUT_ERRORS)
