"""alkstore: claims stop reading expired rows that outrank the due ones (S3)

Revision ID: alkstore_0008_parked_expired
Revises: alkstore_0007_hot_heartbeats
Create Date: 2026-11-30

An expired row stays pending until ``sweep_expired()`` moves it (Q25).
Before this revision each one that outranked the due rows sat in the due
range of ``jobs_claim_ix`` and every claim read it on the heap to see its
``expires_at``: 100,000 of them made a claim 50 times slower.  Now a claim
may *park* such a row (``parked = true``): nothing a caller reads changes,
but ``claim_at`` -- the claim index's time key, computed by PostgreSQL as
``run_at``, or +infinity once parked -- moves it out of the due range.
``jobs_park_ix`` holds the expired rows not parked yet.

Adding the stored generated column rewrites ``jobs`` once (under an
ACCESS EXCLUSIVE lock, in proportion to the live jobs: the table holds
only live work).  Every live job keeps its values; none starts parked.
The way down rebuilds the old claim index and drops both columns; no job
is touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0008_parked_expired"
down_revision: str | Sequence[str] | None = "alkstore_0007_hot_heartbeats"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("status = 'pending'")
UNPARKED_EXPIRING = sa.text("status = 'pending' AND NOT parked AND expires_at IS NOT NULL")
CLAIM_AT = "CASE WHEN parked THEN 'infinity'::timestamptz ELSE run_at END"


def _claim_index_on(column: str, schema: str) -> None:
    """``jobs_claim_ix`` rebuilt as (queue, priority DESC, ``column``, id) over pending rows."""
    op.drop_index("jobs_claim_ix", table_name="jobs", schema=schema)
    op.create_index(
        "jobs_claim_ix",
        "jobs",
        ["queue", sa.text("priority DESC"), column, "id"],
        schema=schema,
        postgresql_where=PENDING,
    )


def upgrade() -> None:
    schema = migration_schema()
    op.add_column(
        "jobs",
        sa.Column("parked", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        schema=schema,
    )
    op.add_column(
        "jobs",
        sa.Column(
            "claim_at",
            sa.DateTime(timezone=True),
            sa.Computed(CLAIM_AT, persisted=True),
            nullable=False,
        ),
        schema=schema,
    )
    _claim_index_on("claim_at", schema)
    op.create_index(
        "jobs_park_ix",
        "jobs",
        ["queue", "expires_at"],
        schema=schema,
        postgresql_where=UNPARKED_EXPIRING,
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_index("jobs_park_ix", table_name="jobs", schema=schema)
    _claim_index_on("run_at", schema)
    op.drop_column("jobs", "claim_at", schema=schema)
    op.drop_column("jobs", "parked", schema=schema)
