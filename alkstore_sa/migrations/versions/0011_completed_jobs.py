"""alkstore: keep completed jobs and their results (R1)

Revision ID: alkstore_0011_completed_jobs
Revises: alkstore_0010_workers
Create Date: 2026-12-01

``jobs.keep_completed`` (and ``dead_jobs.keep_completed``, so a requeue
keeps the stamp) is the R1 stamp: NULL for every job that exists at the
upgrade, so they are acked exactly as before.  ``completed_jobs`` holds the
acked jobs that carried it, with their result, until ``keep_until``.
Adding a nullable column without a default rewrites nothing.  The way down
drops the table (its kept results go with it) and the two columns; no live
or dead job is touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0011_completed_jobs"
down_revision: str | Sequence[str] | None = "alkstore_0010_workers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    schema = migration_schema()
    op.add_column("jobs", sa.Column("keep_completed", sa.Interval()), schema=schema)
    op.add_column("dead_jobs", sa.Column("keep_completed", sa.Interval()), schema=schema)
    op.create_table(
        "completed_jobs",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("run_at", TZ, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("visibility_timeout", sa.Interval(), nullable=False),
        sa.Column("expires_at", TZ),
        sa.Column("worker_id", sa.Text()),
        sa.Column("claim_deadline", TZ),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("errors", postgresql.JSONB()),
        sa.Column("trace_context", postgresql.JSONB()),
        sa.Column("unique_key", sa.Text()),
        sa.Column("keep_completed", sa.Interval(), nullable=False),
        sa.Column("result", sa.LargeBinary()),
        sa.Column("finished_at", TZ, nullable=False),
        sa.Column("keep_until", TZ, nullable=False),
        sa.PrimaryKeyConstraint("id", name="completed_jobs_pkey"),
        schema=schema,
    )
    op.create_index(
        "completed_jobs_queue_keep_until_ix",
        "completed_jobs",
        ["queue", "keep_until"],
        schema=schema,
    )
    op.create_index("completed_jobs_queue_id_ix", "completed_jobs", ["queue", "id"], schema=schema)


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("completed_jobs", schema=schema)
    op.drop_column("dead_jobs", "keep_completed", schema=schema)
    op.drop_column("jobs", "keep_completed", schema=schema)
