"""alkstore: jobs and dead_jobs tables with their claim indexes

Revision ID: alkstore_0001
Revises:
Create Date: 2026-11-29

Frozen copy of ``alkstore_sa.schema`` as of this revision; a test compares
the migrated database with the package's MetaData (M2).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import CreateSchema

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("alkstore",)
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


# Every name goes through op.f(): Alembic would otherwise apply the running
# environment's naming convention to it (ours doubles "jobs_status_ck" into
# "jobs_jobs_status_ck_ck"; a host's would differ again), so the tables would
# depend on whose env.py ran them.


def upgrade() -> None:
    schema = migration_schema()
    # A host application's environment does not create our schema for us.
    op.execute(CreateSchema(schema, if_not_exists=True))
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("run_at", TZ, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("visibility_timeout", sa.Interval, nullable=False),
        sa.Column("expires_at", TZ),
        sa.Column("worker_id", sa.Text),
        sa.Column("claim_deadline", TZ),
        sa.Column(
            "created_at", TZ, nullable=False, server_default=sa.text("statement_timestamp()")
        ),
        sa.Column("last_error", sa.Text),
        sa.PrimaryKeyConstraint("id", name=op.f("jobs_pkey")),
        sa.CheckConstraint("status IN ('pending', 'processing')", name=op.f("jobs_status_ck")),
        sa.CheckConstraint("attempts >= 0", name=op.f("jobs_attempts_ck")),
        sa.CheckConstraint("max_attempts >= 1", name=op.f("jobs_max_attempts_ck")),
        sa.CheckConstraint(
            "visibility_timeout > interval '0'", name=op.f("jobs_visibility_timeout_ck")
        ),
        sa.CheckConstraint(
            "status = 'pending' OR (worker_id IS NOT NULL AND claim_deadline IS NOT NULL)",
            name=op.f("jobs_claimed_ck"),
        ),
        schema=schema,
    )
    op.create_index(
        op.f("jobs_claim_ix"),
        "jobs",
        ["queue", sa.text("priority DESC"), "run_at", "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        op.f("jobs_lapse_ix"),
        "jobs",
        ["queue", "claim_deadline"],
        schema=schema,
        postgresql_where=sa.text("status = 'processing'"),
    )
    op.create_index(
        op.f("jobs_expiry_ix"),
        "jobs",
        ["queue", "expires_at"],
        schema=schema,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_table(
        "dead_jobs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("run_at", TZ, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("visibility_timeout", sa.Interval, nullable=False),
        sa.Column("expires_at", TZ),
        sa.Column("worker_id", sa.Text),
        sa.Column("claim_deadline", TZ),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("died_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("dead_jobs_pkey")),
        schema=schema,
    )
    op.create_index(
        op.f("dead_jobs_queue_died_at_ix"), "dead_jobs", ["queue", "died_at"], schema=schema
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("dead_jobs", schema=schema)
    op.drop_table("jobs", schema=schema)
