"""alkstore: workers, the registry of running Workers (V1)

Revision ID: alkstore_0010_workers
Revises: alkstore_0009_row_checks
Create Date: 2026-12-01

Adds one small table, a row per running Worker (its id, host, pid, queues,
concurrency, version, start and last refresh), which each worker upserts
at start and at least every 10 s and deletes at a graceful stop;
``store.workers()``, ``alkstore workers``, the dashboard and the Prometheus
gauge read it.  No existing row is touched on the way up or down; the way
down drops the table and with it only the registrations (running workers
of the newer package then log that they cannot register).  Frozen copy of
the ``workers`` table in ``alkstore_sa.schema`` as of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0010_workers"
down_revision: str | Sequence[str] | None = "alkstore_0009_row_checks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOW = sa.text("statement_timestamp()")


def upgrade() -> None:
    schema = migration_schema()
    # op.f(): the name as given, whatever naming convention the running env has (see 0001).
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.Text, nullable=False),
        sa.Column("hostname", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("queues", sa.ARRAY(sa.Text), nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("workers_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("workers", schema=migration_schema())
