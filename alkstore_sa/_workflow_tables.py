"""The workflow tables (G1-G3, migration 0013), drawn on ``schema.metadata``.

A step waits in ``workflow_steps``, outside ``jobs``, until every step it
comes after has been acked: no claim ever reads a waiting step.  Triggers
on ``jobs`` (fired only for rows whose ``workflow_id`` is set) keep each
step's ``state`` and promote a step into ``jobs`` in the transaction of its
last upstream's ack (docs/design.md "Workflows").  No foreign keys: only
defer writes steps and edges (one transaction), and only the sweep deletes
them, with their workflow, in one statement.

``schema.py`` calls ``define`` (this module imports nothing of it, so
either may be imported first).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)

__all__ = ["JOB_COLUMNS", "STEP_STATES", "define"]

# waiting: some upstream not acked yet (the would-be job row is held in the
# step); live: its row is in jobs; completed: acked; dead: in dead_jobs (or
# purged from there); cancelled.
STEP_STATES = ("waiting", "live", "completed", "dead", "cancelled")

# The job columns a step holds as they are in jobs, but for ``payload``
# (NULL once the step has left waiting).
JOB_COLUMNS = (
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "visibility_timeout",
    "expires_at",
    "created_at",
    "last_error",
    "errors",
    "trace_context",
    "unique_key",
    "keep_completed",
    "grp",
)


def define(metadata: MetaData, jobs: Table, tz: DateTime) -> tuple[Table, Table, Table]:
    """``workflows``, ``workflow_steps`` and ``workflow_edges`` on ``metadata``."""
    workflows = Table(
        "workflows",
        metadata,
        Column("id", BigInteger, Identity(), primary_key=True),
        Column("name", Text, nullable=False),
        Column("created_at", tz, nullable=False, server_default=text("statement_timestamp()")),
    )

    def copied(name: str) -> Column[object]:
        source = jobs.c[name]
        # Defer gives every value (the enqueue's stamps) but the attempts.
        default = source.server_default if name == "attempts" else None
        return Column(name, source.type, nullable=source.nullable, server_default=default)

    steps = Table(
        "workflow_steps",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("workflow_id", BigInteger, nullable=False),
        Column("queue", Text, nullable=False),
        # The queue's wake channel, computed by the client at defer: a
        # promotion wakes the step's queue as an enqueue would (V5).
        Column("channel", Text, nullable=False),
        Column("state", Text, nullable=False),
        # How many upstreams of a waiting step are not acked yet: a counter on
        # the step's row, so that the last of concurrent acks sees it reach 0.
        Column("remaining", Integer, nullable=False),
        Column("payload", jobs.c.payload.type),
        *(copied(name) for name in JOB_COLUMNS),
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in STEP_STATES) + ")", name="state"
        ),
        CheckConstraint("remaining >= 0", name="remaining"),
        # G3's status, the dashboard and the CLI read a workflow's steps.
        Index("workflow_steps_workflow_id_ix", "workflow_id"),
        # The sweep finds the workflows of its queue (G3).
        Index("workflow_steps_queue_workflow_id_ix", "queue", "workflow_id"),
    )
    # ``step`` comes after ``upstream``.  Keyed by upstream first (an ack finds
    # its downstream steps); the second index serves waiting_on.
    edges = Table(
        "workflow_edges",
        metadata,
        Column("upstream", BigInteger, primary_key=True),
        Column("step", BigInteger, primary_key=True),
        Index("workflow_edges_step_ix", "step"),
    )
    return workflows, steps, edges
