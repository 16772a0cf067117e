"""alkstore: workflows, their steps and edges, and the triggers that run them (G1-G3)

Revision ID: alkstore_0013_workflows
Revises: alkstore_0012_flow_control
Create Date: 2026-12-02

``workflow_id`` on ``jobs``, ``dead_jobs`` and ``completed_jobs`` is NULL
for every job that exists at the upgrade (adding a nullable column without
a default rewrites nothing), so they are claimed, acked and buried exactly
as before: the triggers below fire only for rows whose ``workflow_id`` is
set (their ``WHEN`` is checked without calling the function).

Three triggers on ``jobs`` run the workflows (docs/design.md "Workflows"):

- after a step's row leaves ``jobs`` (any DELETE: an ack, a death, a
  cancel): found in ``dead_jobs`` -> it died, and every waiting step
  downstream of it, transitively, moves to ``dead_jobs`` too (G2); else it
  was acked -> each downstream step's ``remaining`` goes down by one and a
  step reaching 0 is inserted into ``jobs`` (G1).  All in the statement's
  transaction, under a row lock on the workflow, so two acks of one
  workflow's steps take turns and the last sees the counter reach 0.
- after a step's row enters ``jobs``: a promotion marks it live; a
  ``requeue_dead`` of a step with an upstream not acked yet moves the row
  back to waiting (G2).
- after a step is marked cancelled (``Queue.cancel``), its waiting
  downstream steps are cancelled with it (G2).

The functions run as their owner (``SECURITY DEFINER``, with a fixed
``search_path``; every name in them is schema-qualified), so a role that
may ack, fail or requeue a job needs no grant on the workflow tables for
what the triggers do (docs/privileges.md).

The way down drops the triggers, the functions and the three tables (every
workflow's waiting steps go with them; their promoted steps stay ordinary
jobs) and the three columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0013_workflows"
down_revision: str | Sequence[str] | None = "alkstore_0012_flow_control"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)

# The job columns a waiting step holds, in the order a promotion copies them.
_STEP_JOB_COLUMNS = (
    "id, queue, payload, priority, run_at, attempts, max_attempts, visibility_timeout, "
    "expires_at, created_at, last_error, errors, trace_context, unique_key, keep_completed, grp"
)

# The functions' bodies.  ``{s}`` is the schema, quoted as an identifier (never a
# value: every value reaches these functions as a row or an argument).
_FUNCTIONS = """
CREATE FUNCTION {s}.alkstore_wf_to_dead(ids bigint[], why text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- The waiting steps among ids to dead_jobs, last_error = why (and in the history).
  INSERT INTO {s}.dead_jobs (
    id, queue, payload, priority, run_at, attempts, max_attempts, visibility_timeout,
    expires_at, created_at, trace_context, unique_key, keep_completed, grp, workflow_id,
    last_error, died_at, errors)
  SELECT w.id, w.queue, w.payload, w.priority, w.run_at, w.attempts, w.max_attempts,
         w.visibility_timeout, w.expires_at, w.created_at, w.trace_context, w.unique_key,
         w.keep_completed, w.grp, w.workflow_id, why, statement_timestamp(),
         jsonb_path_query_array(
           coalesce(w.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
             'attempt', w.attempts, 'at', statement_timestamp(), 'error', why,
             'traceback', NULL)),
           '$[last - 9 to last]')
  FROM {s}.workflow_steps w
  WHERE w.id = ANY(ids) AND w.state = 'waiting';
  UPDATE {s}.workflow_steps SET state = 'dead', payload = NULL
  WHERE id = ANY(ids) AND state = 'waiting';
END $$;

CREATE FUNCTION {s}.alkstore_wf_bury(dead_id bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  down bigint[];
BEGIN
  -- Every step downstream of dead_id, transitively (a DAG: UNION ends it).
  WITH RECURSIVE d(id) AS (
    SELECT e.step FROM {s}.workflow_edges e WHERE e.upstream = dead_id
    UNION
    SELECT e.step FROM {s}.workflow_edges e JOIN d ON e.upstream = d.id
  )
  SELECT array_agg(id) INTO down FROM d;
  IF down IS NOT NULL THEN
    PERFORM {s}.alkstore_wf_to_dead(down, 'upstream job ' || dead_id || ' dead');
  END IF;
END $$;

CREATE FUNCTION {s}.alkstore_wf_job_left() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  st text;
  ready bigint[];
  went bigint[];
  clash record;
BEGIN
  -- The workflow's lock first: every change to a workflow's steps takes it,
  -- so the statements below read what the previous holder committed.
  PERFORM 1 FROM {s}.workflows WHERE id = OLD.workflow_id FOR NO KEY UPDATE;
  SELECT state INTO st FROM {s}.workflow_steps WHERE id = OLD.id;
  -- Not a step (its workflow was swept), or not a promoted one: a cancel
  -- marked it first (its cascade ran then), a requeue sent it back waiting.
  IF NOT FOUND OR st <> 'live' THEN
    RETURN NULL;
  END IF;
  IF EXISTS (SELECT 1 FROM {s}.dead_jobs WHERE id = OLD.id) THEN
    UPDATE {s}.workflow_steps SET state = 'dead' WHERE id = OLD.id;
    PERFORM {s}.alkstore_wf_bury(OLD.id);
    RETURN NULL;
  END IF;
  -- Acked (deleted, or moved to completed_jobs).
  UPDATE {s}.workflow_steps SET state = 'completed' WHERE id = OLD.id;
  WITH counted AS (
    UPDATE {s}.workflow_steps w SET remaining = w.remaining - 1
    FROM {s}.workflow_edges e
    WHERE e.upstream = OLD.id AND w.id = e.step AND w.state = 'waiting'
    RETURNING w.id, w.remaining
  )
  SELECT array_agg(id) FILTER (WHERE remaining = 0) INTO ready FROM counted;
  IF ready IS NULL THEN
    RETURN NULL;
  END IF;
  -- A waiting step holds no unique key: a key another job took meanwhile
  -- is not waited for (the ack must not fail), the step dies instead (G4).
  WITH promoted AS (
    INSERT INTO {s}.jobs ({cols}, workflow_id)
    SELECT {cols}, workflow_id FROM {s}.workflow_steps
    WHERE id = ANY(ready) ORDER BY id
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue
  )
  SELECT array_agg(id) INTO went FROM promoted;
  PERFORM pg_notify(c.channel, '')
  FROM (SELECT DISTINCT channel FROM {s}.workflow_steps WHERE id = ANY(went)) c;
  FOR clash IN
    SELECT w.id, w.unique_key FROM {s}.workflow_steps w
    WHERE w.id = ANY(ready) AND w.state = 'waiting'
  LOOP
    PERFORM {s}.alkstore_wf_to_dead(
      ARRAY[clash.id], 'unique key ' || clash.unique_key || ' live at promotion');
    PERFORM {s}.alkstore_wf_bury(clash.id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE FUNCTION {s}.alkstore_wf_job_entered() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  st text;
  left_ integer;
  unacked integer;
BEGIN
  SELECT state, remaining INTO st, left_ FROM {s}.workflow_steps WHERE id = NEW.id;
  IF NOT FOUND THEN
    RETURN NULL;  -- its workflow was swept: an ordinary job from now on
  END IF;
  IF st = 'waiting' AND left_ = 0 THEN  -- a promotion, or a root step at defer
    UPDATE {s}.workflow_steps SET state = 'live', payload = NULL WHERE id = NEW.id;
    RETURN NULL;
  END IF;
  -- requeue_dead of a step: back to waiting on the upstreams not acked yet.
  PERFORM 1 FROM {s}.workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
  SELECT count(*) INTO unacked
  FROM {s}.workflow_edges e JOIN {s}.workflow_steps u ON u.id = e.upstream
  WHERE e.step = NEW.id AND u.state <> 'completed';
  IF unacked = 0 THEN
    UPDATE {s}.workflow_steps SET state = 'live', payload = NULL WHERE id = NEW.id;
    RETURN NULL;
  END IF;
  UPDATE {s}.workflow_steps SET
    state = 'waiting', remaining = unacked, payload = NEW.payload, priority = NEW.priority,
    run_at = NEW.run_at, attempts = NEW.attempts, max_attempts = NEW.max_attempts,
    visibility_timeout = NEW.visibility_timeout, expires_at = NEW.expires_at,
    last_error = NEW.last_error, errors = NEW.errors, trace_context = NEW.trace_context,
    unique_key = NEW.unique_key, keep_completed = NEW.keep_completed, grp = NEW.grp
  WHERE id = NEW.id;
  -- Never committed in jobs, so no claim saw it; the delete trigger finds it waiting.
  DELETE FROM {s}.jobs WHERE id = NEW.id;
  RETURN NULL;
END $$;

CREATE FUNCTION {s}.alkstore_wf_cancelled() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM 1 FROM {s}.workflows WHERE id = NEW.workflow_id FOR NO KEY UPDATE;
  WITH RECURSIVE d(id) AS (
    SELECT e.step FROM {s}.workflow_edges e WHERE e.upstream = NEW.id
    UNION
    SELECT e.step FROM {s}.workflow_edges e JOIN d ON e.upstream = d.id
  )
  UPDATE {s}.workflow_steps SET state = 'cancelled', payload = NULL
  WHERE id IN (SELECT id FROM d) AND state = 'waiting';
  RETURN NULL;
END $$;

-- Only the triggers below call them (as their owner).
REVOKE EXECUTE ON FUNCTION {s}.alkstore_wf_bury(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {s}.alkstore_wf_to_dead(bigint[], text) FROM PUBLIC;

CREATE TRIGGER alkstore_wf_job_left AFTER DELETE ON {s}.jobs
FOR EACH ROW WHEN (OLD.workflow_id IS NOT NULL)
EXECUTE FUNCTION {s}.alkstore_wf_job_left();

CREATE TRIGGER alkstore_wf_job_entered AFTER INSERT ON {s}.jobs
FOR EACH ROW WHEN (NEW.workflow_id IS NOT NULL)
EXECUTE FUNCTION {s}.alkstore_wf_job_entered();

-- Only a cancel's own mark (depth 0) cascades: the cascade's marks do not
-- fire it again, the recursive query already reached every downstream step.
CREATE TRIGGER alkstore_wf_cancelled AFTER UPDATE OF state ON {s}.workflow_steps
FOR EACH ROW WHEN (NEW.state = 'cancelled' AND OLD.state <> 'cancelled'
                   AND pg_trigger_depth() < 1)
EXECUTE FUNCTION {s}.alkstore_wf_cancelled();
"""


def _q(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def upgrade() -> None:
    schema = migration_schema()
    for table in ("jobs", "dead_jobs", "completed_jobs"):
        op.add_column(table, sa.Column("workflow_id", sa.BigInteger()), schema=schema)
    op.create_table(
        "workflows",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "created_at", TZ, nullable=False, server_default=sa.text("statement_timestamp()")
        ),
        sa.PrimaryKeyConstraint("id", name="workflows_pkey"),
        schema=schema,
    )
    op.create_table(
        "workflow_steps",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("workflow_id", sa.BigInteger(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary()),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("run_at", TZ, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("visibility_timeout", sa.Interval(), nullable=False),
        sa.Column("expires_at", TZ),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("errors", sa.dialects.postgresql.JSONB()),
        sa.Column("trace_context", sa.dialects.postgresql.JSONB()),
        sa.Column("unique_key", sa.Text()),
        sa.Column("keep_completed", sa.Interval()),
        sa.Column("grp", sa.Text()),  # F3 (0012): a step keeps its group until promoted
        sa.CheckConstraint(
            "state IN ('waiting', 'live', 'completed', 'dead', 'cancelled')",
            name="state",
        ),
        sa.CheckConstraint("remaining >= 0", name="remaining"),
        sa.PrimaryKeyConstraint("id", name="workflow_steps_pkey"),
        schema=schema,
    )
    op.create_index(
        "workflow_steps_workflow_id_ix", "workflow_steps", ["workflow_id"], schema=schema
    )
    op.create_index(
        "workflow_steps_queue_workflow_id_ix",
        "workflow_steps",
        ["queue", "workflow_id"],
        schema=schema,
    )
    op.create_table(
        "workflow_edges",
        sa.Column("upstream", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("upstream", "step", name="workflow_edges_pkey"),
        schema=schema,
    )
    op.create_index("workflow_edges_step_ix", "workflow_edges", ["step"], schema=schema)
    op.execute(sa.text(_FUNCTIONS.format(s=_q(schema), cols=_STEP_JOB_COLUMNS)))


def downgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    op.execute(sa.text(f"DROP TRIGGER alkstore_wf_job_left ON {s}.jobs"))
    op.execute(sa.text(f"DROP TRIGGER alkstore_wf_job_entered ON {s}.jobs"))
    op.drop_table("workflow_edges", schema=schema)
    op.drop_table("workflow_steps", schema=schema)
    op.drop_table("workflows", schema=schema)
    for name in ("alkstore_wf_job_left", "alkstore_wf_job_entered", "alkstore_wf_cancelled"):
        op.execute(sa.text(f"DROP FUNCTION {s}.{name}()"))
    op.execute(sa.text(f"DROP FUNCTION {s}.alkstore_wf_bury(bigint)"))
    op.execute(sa.text(f"DROP FUNCTION {s}.alkstore_wf_to_dead(bigint[], text)"))
    for table in ("completed_jobs", "dead_jobs", "jobs"):
        op.drop_column(table, "workflow_id", schema=schema)
