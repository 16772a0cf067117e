"""alkstore: throughput, per-minute outcome counts of Workers (W2)

Revision ID: alkstore_0006_throughput
Revises: alkstore_0005_periodic
Create Date: 2026-11-30

Adds one small table, (queue, minute) -> acked, retried, dead, which Workers
upsert about once a second and the dashboard reads for its throughput
chart.  No existing row is touched on the way up or down; the way down
drops the table and with it only the counts.  Frozen copy of the
``throughput`` table in ``alkstore_sa.schema`` as of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0006_throughput"
down_revision: str | Sequence[str] | None = "alkstore_0005_periodic"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    # op.f(): the name as given, whatever naming convention the running env has (see 0001).
    op.create_table(
        "throughput",
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acked", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("retried", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("dead", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("queue", "minute", name=op.f("throughput_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("throughput", schema=migration_schema())
