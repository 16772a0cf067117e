"""The package's tables, as SQLAlchemy Core, on one ``MetaData``.

``schema="alkstore"`` is a placeholder: a ``Store(engine, schema=NAME)``
maps it to ``NAME`` at run time with ``schema_translate_map``, and the
migrations create the same tables in whichever schema they are told.

The hot table, ``jobs``, holds only live work (pending or processing): an
ack deletes the row and a dead job moves to ``dead_jobs``, so the claim
indexes stay small however much history a queue has.  ``paused_queues``
holds one row per paused or limited queue (O4, F1), read by every claim.
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
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

from . import _workflow_tables
from ._values.validate import DEFAULT_SCHEMA

__all__ = [
    "DEFAULT_SCHEMA",
    "completed_jobs",
    "dead_jobs",
    "flow_rates",
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
# made the claim itself fail on the server.  PostgreSQL reads every table
# check back and plans it once per statement that writes the table, so
# they are few and short: on jobs, the time, timeout and errors checks live
# on domains (migrations 0015 and 0017: loadable_time on run_at,
# created_at, expires_at, claim_deadline and deadline_floor,
# visibility_timeout, error_history on errors), planned once per connection
# and run only on the columns a statement assigns.  Like fillfactor and the
# workflow triggers, the domains come from the migrations, not from this
# MetaData (the columns' types here are the domains' base types, which is
# what statements need).
# LEAST/GREATEST skip NULLs, and a CHECK passes on NULL.
_EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
_LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
_MAX_VT = "'1000000000 seconds'::interval"
_ERRORS_ARRAY = "jsonb_typeof(errors) = 'array'"
_GROUPED = "status = 'pending' AND %s AND grp IS NOT NULL"
_HELD_KEYS = ("queue", "grp", text("priority DESC"), "run_at", "id")


def _times(*columns: str) -> str:
    listed = ", ".join(columns)
    return f"LEAST({listed}) >= {_EARLIEST} AND GREATEST({listed}) <= {_LATEST}"


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
    Column("errors", JSONB),  # B2: the last ERROR_HISTORY_LIMIT errors, oldest first
    Column("trace_context", JSONB),  # B3: the enqueuer's W3C carrier; NULL when untraced
    Column("unique_key", Text),  # U1: the job's unique key, or NULL
    # Heartbeats without index churn (internal): a lower bound on claim_deadline
    # that the lapse index keys on, never raised by a heartbeat (a HOT update).
    Column("deadline_floor", _TZ),
    # Parking (internal): a pending row out of the claim's index range: expired
    # (S3, ``_sql/claim.park``) or of a group at its limit (F3, ``flow_claim.py``).
    Column("parked", Boolean, nullable=False, server_default=text("false")),
    # R1: how long the job is kept once acked (resolved at enqueue); NULL: deleted.
    Column("keep_completed", Interval),
    Column("grp", Text),  # F3: the job's group (EnqueueOpts.group), or NULL
    # G1: the workflow of a step, else NULL; the workflow triggers fire only where set.
    Column("workflow_id", BigInteger),
    CheckConstraint("status IN ('pending', 'processing')", name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    CheckConstraint("max_attempts >= 1", name="max_attempts"),
    CheckConstraint(
        "status = 'pending' OR (worker_id IS NOT NULL AND claim_deadline IS NOT NULL)",
        name="claimed",
    ),
    # The claim's attempts + 1 never passes max_attempts (so never overflows):
    # a pending row has an attempt left.  No statement writes a row outside
    # this: a retry, release or lapse at the last attempt moves it to dead.
    CheckConstraint(
        "attempts <= max_attempts AND (status <> 'pending' OR attempts < max_attempts)",
        name="attempts_left",
    ),
    # The claim walks this in its ORDER BY (Q9) and stops at LIMIT.  Parked rows
    # come after their level's others, where a claim's scan (NOT parked) stops.
    Index(
        "jobs_claim_ix",
        "queue",
        text("priority DESC"),
        "parked",
        "run_at",
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
    # 0007 also sets fillfactor = 70 (HOT heartbeats; Alembic does not compare it).
    # Lapsed claims: reclaimed or dead-lettered before each claim (Q12).
    # Candidates by deadline_floor, each re-checked against claim_deadline.
    Index(
        "jobs_lapse_ix",
        "queue",
        "deadline_floor",
        postgresql_where=text("status = 'processing'"),
    ),
    # sweep_expired() finds past-expiry rows without a scan (Q25).
    Index("jobs_expiry_ix", "queue", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    # U1: at most one live job per queue and key: keyed enqueues insert ON
    # CONFLICT against it, and look a live key's job up through it.
    Index(
        "jobs_queue_unique_key_ix",
        "queue",
        "unique_key",
        unique=True,
        postgresql_where=text("unique_key IS NOT NULL"),
    ),
    # F3: a group's unparked pending rows (what a claim parks at the group's limit)
    # and its parked ones in claim order (what a freed slot promotes).
    Index("jobs_group_ix", "queue", "grp", postgresql_where=text(_GROUPED % "NOT parked")),
    Index("jobs_held_ix", *_HELD_KEYS, postgresql_where=text(_GROUPED % "parked")),
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
        _times("run_at", "created_at", "died_at", "expires_at", "claim_deadline"),
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
    # Added by 0011, 0012, 0013: the R1 stamp, the group (F3) and the workflow
    # of a step (G2), kept so a requeue restores them.
    Column("keep_completed", Interval),
    Column("grp", Text),
    Column("workflow_id", BigInteger),
)

# R1: acked jobs stamped with keep_completed, moved here by the ack's own
# statement with their result; sweep_expired() deletes them after keep_until.
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
    Column("grp", Text),  # added by 0012 (F3)
    Column("workflow_id", BigInteger),  # added by 0013 (G1)
    # The sweep deletes by (queue, keep_until); listings go by id.
    Index("completed_jobs_queue_keep_until_ix", "queue", "keep_until"),
    Index("completed_jobs_queue_id_ix", "queue", "id"),
)

# O4, F1: a settings row per queue paused (paused_at) or limited, or both.
# A limited queue looks paused to the unlimited claim (_db/flow.py).
_RATES = ("rate", "group_rate")
paused_queues = Table(
    "paused_queues",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("paused_at", _TZ, nullable=True, server_default=text("statement_timestamp()")),
    Column("concurrency", Integer),
    Column("group_concurrency", Integer),
    *(Column(c, t) for r in _RATES for c, t in ((f"{r}_count", Integer), (f"{r}_per", Interval))),
    CheckConstraint(
        "paused_at IS NOT NULL OR concurrency IS NOT NULL OR group_concurrency IS NOT NULL"
        " OR rate_count IS NOT NULL OR group_rate_count IS NOT NULL",
        name="in_use",
    ),
    CheckConstraint(
        "(concurrency IS NULL OR concurrency >= 1)"
        " AND (group_concurrency IS NULL OR group_concurrency >= 1)"
        + "".join(
            f" AND ({r}_count IS NULL) = ({r}_per IS NULL)"
            f" AND ({r}_count IS NULL OR ({r}_count >= 1 AND {r}_per > interval '0'))"
            for r in _RATES
        ),
        name="limits",
    ),
)

# F4: claim times in the rate's window, per queue (grp '') and (queue, group).
flow_rates = Table(
    "flow_rates",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("grp", Text, primary_key=True),
    Column("claimed", ARRAY(_TZ), nullable=False),
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

# W2: jobs acked, retried and dead-lettered per queue and minute (database
# clock): one upsert per queue about once a second, which also deletes rows
# older than a couple of hours.  Read by the dashboard's throughput chart.
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
