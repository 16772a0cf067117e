"""The package's tables, as SQLAlchemy Core, on one ``MetaData``.

``schema="alkstore"`` is a placeholder: a ``Store(engine, schema=NAME)``
maps it to ``NAME`` at run time with ``schema_translate_map``, and the
migrations create the same tables in whichever schema they are told.

The hot table, ``jobs``, holds only live work (pending or processing): an
ack deletes the row and a dead job moves to ``dead_jobs``, so the claim
indexes stay small however much history a queue has.  ``paused_queues``
holds one row per paused queue (O4), read by every claim.
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
    Interval,
    LargeBinary,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

__all__ = ["DEFAULT_SCHEMA", "dead_jobs", "jobs", "metadata", "paused_queues", "throughput"]

DEFAULT_SCHEMA = "alkstore"

metadata = MetaData(
    schema=DEFAULT_SCHEMA,
    naming_convention={
        "ix": "%(table_name)s_%(column_0_N_name)s_ix",
        "ck": "%(table_name)s_%(constraint_name)s_ck",
        "pk": "%(table_name)s_pkey",
    },
)

_TZ = DateTime(timezone=True)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'pending'")),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("run_at", _TZ, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("visibility_timeout", Interval, nullable=False),
    Column("expires_at", _TZ),
    Column("worker_id", Text),
    Column("claim_deadline", _TZ),
    Column("created_at", _TZ, nullable=False, server_default=text("statement_timestamp()")),
    Column("last_error", Text),
    # B2: the job's last ERROR_HISTORY_LIMIT errors, oldest first; NULL before any.
    Column("errors", JSONB),
    # B3: the enqueuer's propagated trace context (W3C carrier); NULL when untraced.
    Column("trace_context", JSONB),
    CheckConstraint("status IN ('pending', 'processing')", name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    CheckConstraint("visibility_timeout > interval '0'", name="visibility_timeout"),
    CheckConstraint(
        "status = 'pending' OR (worker_id IS NOT NULL AND claim_deadline IS NOT NULL)",
        name="claimed",
    ),
    # The claim walks this in its ORDER BY (Q9) and stops at LIMIT.
    Index(
        "jobs_claim_ix",
        "queue",
        text("priority DESC"),
        "run_at",
        "id",
        postgresql_where=text("status = 'pending'"),
    ),
    # Lapsed claims: reclaimed or dead-lettered before each claim (Q12).
    Index(
        "jobs_lapse_ix",
        "queue",
        "claim_deadline",
        postgresql_where=text("status = 'processing'"),
    ),
    # sweep_expired() finds past-expiry rows without a scan (Q25).
    Index(
        "jobs_expiry_ix",
        "queue",
        "expires_at",
        postgresql_where=text("expires_at IS NOT NULL"),
    ),
)

dead_jobs = Table(
    "dead_jobs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("queue", Text, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("run_at", _TZ, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("visibility_timeout", Interval, nullable=False),
    Column("expires_at", _TZ),
    Column("worker_id", Text),
    Column("claim_deadline", _TZ),
    Column("created_at", _TZ, nullable=False),
    Column("last_error", Text),
    Column("died_at", _TZ, nullable=False),
    # Added by 0003 after died_at (the physical order); same meaning as in jobs.
    Column("errors", JSONB),
    Column("trace_context", JSONB),
    # Retention purges walk this (Q25).
    Index("dead_jobs_queue_died_at_ix", "queue", "died_at"),
)

# O4: a row per paused queue; every claim looks its queue up here (by the
# primary key) in the same statement, so a pause is seen at once.
paused_queues = Table(
    "paused_queues",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("paused_at", _TZ, nullable=False, server_default=text("statement_timestamp()")),
)

# W2: how many jobs Workers acked, retried and dead-lettered, per queue and
# minute (the database's clock).  Workers add their tallies here about once
# a second, one upsert per queue, never per job; rows older than a couple of
# hours are deleted by the same statement, so the table stays a few rows
# per queue.  Read by the dashboard's throughput chart.
throughput = Table(
    "throughput",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("minute", _TZ, primary_key=True),
    Column("acked", BigInteger, nullable=False, server_default=text("0")),
    Column("retried", BigInteger, nullable=False, server_default=text("0")),
    Column("dead", BigInteger, nullable=False, server_default=text("0")),
)
