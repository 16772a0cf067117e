"""alkstore: periodic, the last fired slot of each periodic schedule (P1)

Revision ID: alkstore_0005_periodic
Revises: alkstore_0004_unique_keys
Create Date: 2026-11-30

Adds one table and touches no existing row: jobs and dead letters are kept
as they are on the way up and on the way down.  On the way down the
schedules' fired slots are lost: after a new upgrade each schedule starts
again at its next slot (as a schedule never seen before does).  Frozen copy
of the ``periodic`` table in ``alkstore_sa.schema`` as of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0005_periodic"
# The current head when this was written (0004 is being written beside it);
# the chain is put in order when the branches merge.
down_revision: str | Sequence[str] | None = "alkstore_0004_unique_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = migration_schema()
    # op.f(): the name as given, whatever naming convention the running env has (see 0001).
    op.create_table(
        "periodic",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("last_slot", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("statement_timestamp()"),
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("periodic_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("periodic", schema=migration_schema())
