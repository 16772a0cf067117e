"""alkstore: error history (B2) and trace context (B3) on jobs and dead letters

Revision ID: alkstore_0003
Revises: alkstore_0002
Create Date: 2026-11-30

Two nullable ``jsonb`` columns on ``jobs`` and ``dead_jobs``: adding them
rewrites no row and takes only a brief lock.  A row that already has a
``last_error`` gets a one-entry history on the way up, so the B2 rule "the
last entry's error equals ``last_error``" holds for jobs enqueued before
the upgrade too (``at`` is the death time for dead rows, the upgrade's time
for live ones; no traceback).  The way down drops both columns: the
history's older entries and the trace contexts are lost, every job and its
``last_error`` stay.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0003"
down_revision: str | Sequence[str] | None = "alkstore_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "dead_jobs")
NEW_COLUMNS = ("errors", "trace_context")


def upgrade() -> None:
    schema = migration_schema()
    for table in TABLES:
        for column in NEW_COLUMNS:
            op.add_column(table, sa.Column(column, JSONB), schema=schema)
    at = {"jobs": "statement_timestamp()", "dead_jobs": "died_at"}
    for table in TABLES:
        # Identifiers come from this file and the migration's schema, quoted
        # by the dialect; no value is pasted into the text.
        target = sa.table(table, sa.column("errors"), schema=schema)
        quoted = op.get_context().dialect.identifier_preparer.format_table(target)
        op.execute(
            sa.text(
                f"UPDATE {quoted} SET errors = jsonb_build_array(jsonb_build_object("
                f"'attempt', attempts, 'at', {at[table]}, 'error', last_error, "
                "'traceback', NULL)) WHERE last_error IS NOT NULL"
            )
        )


def downgrade() -> None:
    schema = migration_schema()
    for table in TABLES:
        for column in NEW_COLUMNS:
            op.drop_column(table, column, schema=schema)
