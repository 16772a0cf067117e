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
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
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

from . import _workflow_tables
from ._values.validate import DEFAULT_SCHEMA

__all__ = [
    "DEFAULT_SCHEMA",
    "completed_jobs",
    "dead_jobs",
    "jobs",
    "metadata",
    "paused_queues",
    "periodic",
    "throughput",
    "workers",
    "workflow_edges",
    "workflow_steps",
    "workflows",
]


metadata = MetaData(
    schema=DEFAULT_SCHEMA,
    naming_convention={
        "ix": "%(table_name)s_%(column_0_N_name)s_ix",
        "ck": "%(table_name)s_%(constraint_name)s_ck",
        "pk": "%(table_name)s_pkey",
    },
)

_TZ = DateTime(timezone=True)

# Rows the library can load (migration 0009): every time within what Python
# shows in any session time zone (validate.aware_datetime's range; infinity
# fails both bounds), a visibility timeout of at most 10**9 s
# (validate.MAX_SECONDS), errors a JSON array.  trace_context stays free: a
# carrier the library cannot read starts a fresh trace (B3).
# A claim could not hand out a row outside these: it failed to load, or
# made the claim itself fail on the server.
_EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
_LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
_MAX_VT = "'1000000000 seconds'::interval"
_ERRORS_ARRAY = "errors IS NULL OR jsonb_typeof(errors) = 'array'"


def _times(required: list[str], optional: list[str]) -> str:
    def check(column: str) -> str:
        return f"{column} >= {_EARLIEST} AND {column} <= {_LATEST}"

    return " AND ".join(
        [f"({check(c)})" for c in required] + [f"({c} IS NULL OR ({check(c)}))" for c in optional]
    )


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
    # U1: the job's unique key; NULL for a job without one.
    Column("unique_key", Text),
    # Heartbeats without index churn: a lower bound on claim_deadline, set by
    # the claim and lowered (never raised) by a heartbeat that shortens the
    # claim.  The lapse index keys on this instead of claim_deadline, so a
    # heartbeat that extends a claim changes no indexed column and can be a
    # HOT update (no index entries, no dead index tuples for the claim to
    # step over).  Internal: not a Job field; the contract's deadline is
    # claim_deadline.
    Column("deadline_floor", _TZ),
    # Parking: an expired pending row the claim has set aside for the sweep
    # (``_sql/claim.park``).  It stays pending and expired, as the contract
    # says, until sweep_expired() moves it (Q25); parking only takes it out
    # of the claim's index range, so claims stop reading it.  Internal.
    Column("parked", Boolean, nullable=False, server_default=text("false")),
    # Parking: the claim index's time key: run_at, or +infinity once parked (never
    # due, so never in the due range a claim scans).  Computed by PostgreSQL
    # from the row, so no statement that sets run_at can forget it; for an
    # unparked row it is run_at, so the claim order (Q9) is unchanged.
    Column(
        "claim_at",
        _TZ,
        Computed("CASE WHEN parked THEN 'infinity'::timestamptz ELSE run_at END", persisted=True),
        nullable=False,
    ),
    # R1: how long the job is kept once acked (the stamp, resolved at
    # enqueue); NULL (the default) deletes it at its ack, as Q16 says.
    Column("keep_completed", Interval),
    # G1: the workflow this job is a step of (migration 0013); NULL for every
    # other job.  The workflow triggers fire only for rows where it is set.
    Column("workflow_id", BigInteger),
    CheckConstraint("status IN ('pending', 'processing')", name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    CheckConstraint("visibility_timeout > interval '0'", name="visibility_timeout"),
    CheckConstraint(
        "status = 'pending' OR (worker_id IS NOT NULL AND claim_deadline IS NOT NULL)",
        name="claimed",
    ),
    CheckConstraint(
        _times(["run_at", "created_at"], ["expires_at", "claim_deadline", "deadline_floor"]),
        name="times",
    ),
    CheckConstraint(f"visibility_timeout <= {_MAX_VT}", name="visibility_timeout_bound"),
    CheckConstraint(_ERRORS_ARRAY, name="errors"),
    # The claim's attempts + 1 never passes max_attempts (so never overflows):
    # a pending row has an attempt left.  No statement writes a row outside
    # this: a retry, release or lapse at the last attempt moves it to dead.
    CheckConstraint(
        "attempts <= max_attempts AND (status <> 'pending' OR attempts < max_attempts)",
        name="attempts_left",
    ),
    # The claim walks this in its ORDER BY (Q9) and stops at LIMIT.
    # claim_at is run_at for every row a claim may take (see above).
    Index(
        "jobs_claim_ix",
        "queue",
        text("priority DESC"),
        "claim_at",
        "id",
        postgresql_where=text("status = 'pending'"),
    ),
    # Parking: expired pending rows not parked yet -- what a park looks for, and
    # nothing else (rows without an expiry never enter it).
    Index(
        "jobs_park_ix",
        "queue",
        "expires_at",
        postgresql_where=text("status = 'pending' AND NOT parked AND expires_at IS NOT NULL"),
    ),
    # Migration 0007 also sets fillfactor = 70 on this table (room on each
    # page for a heartbeat's HOT update); not declared here, since
    # Alembic does not compare storage parameters.
    # Lapsed claims: reclaimed or dead-lettered before each claim (Q12).
    # Candidates by deadline_floor, each re-checked against claim_deadline.
    Index(
        "jobs_lapse_ix",
        "queue",
        "deadline_floor",
        postgresql_where=text("status = 'processing'"),
    ),
    # sweep_expired() finds past-expiry rows without a scan (Q25).
    Index(
        "jobs_expiry_ix",
        "queue",
        "expires_at",
        postgresql_where=text("expires_at IS NOT NULL"),
    ),
    # U1: at most one live job per queue and key.  Keyed enqueues insert
    # ON CONFLICT against it (the database decides, never a read first),
    # and look a live key's job up through it.
    Index(
        "jobs_queue_unique_key_ix",
        "queue",
        "unique_key",
        unique=True,
        postgresql_where=text("unique_key IS NOT NULL"),
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
    # Added by 0004: the key the job had while it lived (U1), kept so a
    # requeue restores it.  Not unique here: dead letters hold no key.
    Column("unique_key", Text),
    # Migration 0009: what a requeue copies back must pass jobs' checks.
    CheckConstraint(
        _times(["run_at", "created_at", "died_at"], ["expires_at", "claim_deadline"]),
        name="times",
    ),
    CheckConstraint(
        f"visibility_timeout > interval '0' AND visibility_timeout <= {_MAX_VT}",
        name="visibility_timeout",
    ),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    CheckConstraint(_ERRORS_ARRAY, name="errors"),
    # Retention purges walk this (Q25).
    Index("dead_jobs_queue_died_at_ix", "queue", "died_at"),
    # Added by 0011: the job's R1 stamp, kept so a requeue restores it.
    Column("keep_completed", Interval),
    # Added by 0013: the workflow of a step (G2), kept so a requeue restores it.
    Column("workflow_id", BigInteger),
)

# R1: acked jobs stamped with keep_completed, moved here by the ack's own
# statement (so in its transaction) with their result, and deleted by
# sweep_expired() once keep_until has passed.  Cold like dead_jobs: the hot
# table never holds them.
completed_jobs = Table(
    "completed_jobs",
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
    Column("errors", JSONB),
    Column("trace_context", JSONB),
    Column("unique_key", Text),
    Column("keep_completed", Interval, nullable=False),
    Column("result", LargeBinary),
    Column("finished_at", _TZ, nullable=False),
    Column("keep_until", _TZ, nullable=False),
    # Added by 0013: the workflow of a kept step (G1).
    Column("workflow_id", BigInteger),
    # The sweep deletes by (queue, keep_until); listings go by id.
    Index("completed_jobs_queue_keep_until_ix", "queue", "keep_until"),
    Index("completed_jobs_queue_id_ix", "queue", "id"),
)

# O4: a row per paused queue; every claim looks its queue up here (by the
# primary key) in the same statement, so a pause is seen at once.
paused_queues = Table(
    "paused_queues",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("paused_at", _TZ, nullable=False, server_default=text("statement_timestamp()")),
)

# P1: a row per periodic schedule (by name) with the last slot it fired; a
# worker fires a slot by moving last_slot forward with a compare-and-set
# UPDATE in the enqueue's transaction, so one slot is one job however many
# workers run the schedule.
periodic = Table(
    "periodic",
    metadata,
    Column("name", Text, primary_key=True),
    Column("last_slot", _TZ, nullable=False),
    Column("updated_at", _TZ, nullable=False, server_default=text("statement_timestamp()")),
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

# V1: a row per running Worker (per schema it serves), upserted by the worker
# at start and at least every 10 s, deleted at its graceful stop.  A row not
# refreshed for a minute is a worker that died or lost the database: shown
# as gone, then pruned by the other workers' refreshes.
workers = Table(
    "workers",
    metadata,
    Column("worker_id", Text, primary_key=True),
    Column("hostname", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", ARRAY(Text), nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("version", Text, nullable=False),
    Column("started_at", _TZ, nullable=False, server_default=text("statement_timestamp()")),
    Column("last_seen", _TZ, nullable=False, server_default=text("statement_timestamp()")),
)

# G1-G3 (migration 0013): a workflow, its steps and the edges between them,
# drawn in ``_workflow_tables`` (on this MetaData; ``jobs`` lends its types).
workflows, workflow_steps, workflow_edges = _workflow_tables.define(metadata, jobs, _TZ)
