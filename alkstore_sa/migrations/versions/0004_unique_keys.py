"""alkstore: unique keys (U1) on jobs and dead letters

Revision ID: alkstore_0004_unique_keys
Revises: alkstore_0003
Create Date: 2026-11-30

A nullable ``text`` column ``unique_key`` on ``jobs`` and ``dead_jobs``
(adding it rewrites no row) and a partial unique index over the live table,
``(queue, unique_key) WHERE unique_key IS NOT NULL``: at most one live job
per queue and key, enforced by PostgreSQL.  Every job already in the tables
has no key, so none is in the index and none can clash.  The index is built
with a plain ``CREATE UNIQUE INDEX`` inside the migration's transaction: it
blocks writes to ``jobs`` while it scans the table, which holds live work
only (short).

The way down drops the index and both columns: the keys are lost (the jobs
that had one become ordinary jobs), every job stays.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0004_unique_keys"
down_revision: str | Sequence[str] | None = "alkstore_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "dead_jobs")


def upgrade() -> None:
    schema = migration_schema()
    for table in TABLES:
        op.add_column(table, sa.Column("unique_key", sa.Text), schema=schema)
    # op.f(): the name as given, whatever naming convention the running env has (see 0001).
    op.create_index(
        op.f("jobs_queue_unique_key_ix"),
        "jobs",
        ["queue", "unique_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("unique_key IS NOT NULL"),
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_index(op.f("jobs_queue_unique_key_ix"), table_name="jobs", schema=schema)
    for table in TABLES:
        op.drop_column(table, "unique_key", schema=schema)
