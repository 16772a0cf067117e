"""alkstore: the claim index keys on parked and run_at; the generated claim_at goes

Revision ID: alkstore_0016_claim_index_parked
Revises: alkstore_0015_domain_checks
Create Date: 2026-12-05

0008 took parked rows out of the claims' range with a stored generated
column, ``claim_at`` (``run_at``, or +infinity once parked), as the time key
of ``jobs_claim_ix``.  A stored generated column is computed for every row
inserted and for every row an UPDATE writes, by copying the whole row once
more: ~0.9 us of an enqueued row's ~8.5 us of server time in a 1,000-row
``enqueue_many``, and a share of every claimed row's (docs/benchmarks.md,
stop 38); on PostgreSQL 18 its expression is also read back once per
statement, or per row for an UPDATE that assigns none of its inputs.

The same order without it: ``jobs_claim_ix`` becomes (queue, priority
DESC, parked, run_at, id) over pending rows.  Within a priority level the
unparked rows come first, in (run_at, id) order, and the claims' scans take
only ``NOT parked`` rows (an index condition, and, being fixed, no part of
the order), so a parked row is past where any claim reads -- as its
+infinity ``claim_at`` put it.  Every other reader of pending rows (stats,
listings, queue names) still finds all of them in this one index.

The way up drops the index and the column (no table rewrite: a dropped
column's bytes stay in the rows until they are next written) and builds
the new index; no job is touched.  The way down adds ``claim_at`` back
(which rewrites ``jobs`` once, as 0008 did) and rebuilds 0008's index.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0016_claim_index_parked"
down_revision: str | Sequence[str] | None = "alkstore_0015_domain_checks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("status = 'pending'")
CLAIM_AT = "CASE WHEN parked THEN 'infinity'::timestamptz ELSE run_at END"


def _claim_index_on(columns: list[str], schema: str) -> None:
    """``jobs_claim_ix`` rebuilt as (queue, priority DESC, ``columns``, id) over pending rows."""
    op.drop_index("jobs_claim_ix", table_name="jobs", schema=schema)
    op.create_index(
        "jobs_claim_ix",
        "jobs",
        ["queue", sa.text("priority DESC"), *columns, "id"],
        schema=schema,
        postgresql_where=PENDING,
    )


def upgrade() -> None:
    schema = migration_schema()
    _claim_index_on(["parked", "run_at"], schema)
    op.drop_column("jobs", "claim_at", schema=schema)


def downgrade() -> None:
    schema = migration_schema()
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
    _claim_index_on(["claim_at"], schema)
