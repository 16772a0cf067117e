"""alkstore: flow control -- limits per queue, groups, rates (F1-F4)

Revision ID: alkstore_0012_flow_control
Revises: alkstore_0011_completed_jobs
Create Date: 2026-12-02

``paused_queues`` becomes a queue's settings row: ``paused_at`` turns
nullable (NULL: limits only) and the limits are added as nullable columns,
so every pause in force stays a row with its ``paused_at``, unchanged.
``flow_rates`` holds the claim times a rate counts (F4).
``grp`` (F3, a job's group) is a nullable text column on ``jobs``,
``dead_jobs`` and ``completed_jobs``: NULL for every job at the upgrade.
Adding nullable
columns without defaults rewrites nothing.  The way down deletes rows that
held limits only (their queues were never paused) and drops what was
added; every pause, live, dead and kept job stays.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0012_flow_control"
down_revision: str | Sequence[str] | None = "alkstore_0011_completed_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIMITS = ("concurrency", "group_concurrency", "rate_count", "group_rate_count")
IN_USE = "paused_at IS NOT NULL OR " + " OR ".join(f"{c} IS NOT NULL" for c in _LIMITS)
LIMITS = (
    "(concurrency IS NULL OR concurrency >= 1)"
    " AND (group_concurrency IS NULL OR group_concurrency >= 1)"
    " AND (rate_count IS NULL) = (rate_per IS NULL)"
    " AND (rate_count IS NULL OR (rate_count >= 1 AND rate_per > interval '0'))"
    " AND (group_rate_count IS NULL) = (group_rate_per IS NULL)"
    " AND (group_rate_count IS NULL OR (group_rate_count >= 1 AND group_rate_per > interval '0'))"
)


def upgrade() -> None:
    schema = migration_schema()
    for table in ("jobs", "dead_jobs", "completed_jobs"):
        op.add_column(table, sa.Column("grp", sa.Text()), schema=schema)
    op.alter_column("paused_queues", "paused_at", nullable=True, schema=schema)
    for name, type_ in (
        ("concurrency", sa.Integer()),
        ("group_concurrency", sa.Integer()),
        ("rate_count", sa.Integer()),
        ("rate_per", sa.Interval()),
        ("group_rate_count", sa.Integer()),
        ("group_rate_per", sa.Interval()),
    ):
        op.add_column("paused_queues", sa.Column(name, type_), schema=schema)
    for name, condition in (("in_use", IN_USE), ("limits", LIMITS)):
        op.create_check_constraint(
            op.f(f"paused_queues_{name}_ck"), "paused_queues", condition, schema=schema
        )
    op.create_index(
        "jobs_group_ix",
        "jobs",
        ["queue", "grp"],
        schema=schema,
        postgresql_where=sa.text("status = 'pending' AND NOT parked AND grp IS NOT NULL"),
    )
    op.create_index(
        "jobs_held_ix",
        "jobs",
        ["queue", "grp", sa.text("priority DESC"), "run_at", "id"],
        schema=schema,
        postgresql_where=sa.text("status = 'pending' AND parked AND grp IS NOT NULL"),
    )

    op.create_table(
        "flow_rates",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("grp", sa.Text(), nullable=False),
        sa.Column("claimed", postgresql.ARRAY(sa.DateTime(timezone=True)), nullable=False),
        sa.PrimaryKeyConstraint("queue", "grp", name="flow_rates_pkey"),
        schema=schema,
    )


def downgrade() -> None:
    schema = migration_schema()
    op.drop_table("flow_rates", schema=schema)
    op.drop_index("jobs_held_ix", table_name="jobs", schema=schema)
    op.drop_index("jobs_group_ix", table_name="jobs", schema=schema)
    # Rows parked for their group (not expired) go back into the claim's range.
    jobs = sa.table(
        "jobs", sa.column("parked"), sa.column("grp"), sa.column("expires_at"), schema=schema
    )
    now = sa.func.statement_timestamp()
    op.execute(
        jobs.update()
        .where(
            jobs.c.parked,
            jobs.c.grp.is_not(None),
            sa.or_(jobs.c.expires_at.is_(None), jobs.c.expires_at > now),
        )
        .values(parked=False)
    )
    op.drop_constraint(op.f("paused_queues_limits_ck"), "paused_queues", schema=schema)
    op.drop_constraint(op.f("paused_queues_in_use_ck"), "paused_queues", schema=schema)
    settings = sa.table("paused_queues", sa.column("paused_at"), schema=schema)
    op.execute(settings.delete().where(settings.c.paused_at.is_(None)))
    for name in (
        "group_rate_per",
        "group_rate_count",
        "rate_per",
        "rate_count",
        "group_concurrency",
        "concurrency",
    ):
        op.drop_column("paused_queues", name, schema=schema)
    op.alter_column("paused_queues", "paused_at", nullable=False, schema=schema)
    for table in ("completed_jobs", "dead_jobs", "jobs"):
        op.drop_column(table, "grp", schema=schema)
