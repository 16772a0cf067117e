"""alkstore: paused_queues, the pause state of queues (O4)

Revision ID: alkstore_0002
Revises: alkstore_0001
Create Date: 2026-12-06

Adds one table and touches no existing row: jobs and dead letters are kept
as they are on the way up and on the way down.  Frozen copy of the
``paused_queues`` table in ``alkstore_sa.schema`` as of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0002"
down_revision: str | Sequence[str] | None = "alkstore_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    # op.f(): the name as given, whatever naming convention the running env has (see 0001).
    op.create_table(
        "paused_queues",
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column(
            "paused_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("statement_timestamp()"),
        ),
        sa.PrimaryKeyConstraint("queue", name=op.f("paused_queues_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("paused_queues", schema=migration_schema())
