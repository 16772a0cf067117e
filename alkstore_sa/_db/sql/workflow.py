"""Workflows' statements (G1-G4) that write: defer's, and the sweep of finished
workflows (the reads are in ``workflow_reads``).

What happens at an ack, a death, a cancel or a requeue of a step is not
here: triggers on ``jobs`` do it in that statement's transaction, for the
rows whose ``workflow_id`` is set (migration 0013, docs/design.md
"Workflows").
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    DateTime,
    Integer,
    Interval,
    Select,
    Text,
    bindparam,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    true,
)

from ..._workflow_tables import JOB_COLUMNS
from ...schema import (
    completed_jobs,
    dead_jobs,
    jobs,
    workflow_edges,
    workflow_steps,
    workflows,
)
from ._common import NOW, queue_param
from .enqueue import _Payload

__all__ = [
    "STEP_JOB_COLUMNS",
    "draw_ids",
    "insert_steps",
    "promote_roots",
    "sweep_finished",
    "taken_keys",
    "word",
    "workflow_id_param",
]

steps = workflow_steps
edges = workflow_edges

# The job columns a step holds and a promotion copies into jobs (the
# migration's trigger copies the same list).
STEP_JOB_COLUMNS = ("id", "queue", "payload", *JOB_COLUMNS)


def word(value: str) -> ColumnElement[str]:
    """A state name, bound (never pasted into the text)."""
    return literal(value, type_=Text)


def workflow_id_param() -> ColumnElement[int]:
    return bindparam("p_workflow_id", type_=BigInteger)


@cache
def draw_ids() -> Select[Any]:
    """G1: the workflow's row and ``:n`` job ids, drawn from the jobs' own sequence.

    A step keeps its id from defer to ack (waiting, live, dead, completed):
    the id ``WorkflowRun.job_ids`` reports is the job's.  ``:jobs_table`` is
    the quoted ``schema.jobs`` name, bound as a value for
    ``pg_get_serial_sequence``.  Rows: ``(workflow id, created_at, job id)``.
    """
    made = (
        insert(workflows)
        .values(name=bindparam("p_name", type_=Text))
        .returning(workflows.c.id, workflows.c.created_at)
        .cte("made")
    )
    sequence = func.pg_get_serial_sequence(
        bindparam("p_jobs_table", type_=Text), literal("id", type_=Text)
    )
    series = func.generate_series(literal(1, type_=Integer), bindparam("p_n", type_=Integer))
    return select(made.c.id, made.c.created_at, func.nextval(sequence).label("job_id")).select_from(
        made.join(series.alias("series"), true())
    )


@cache
def insert_steps() -> Select[Any]:
    """G1: every step of ``:workflow_id`` as waiting, and its edges, in one statement.

    Parallel arrays, one entry per step; times resolved like an enqueue's
    (Q4: ``run_at`` or now + ``delay``, now + ``expires_in``, one clock read).
    ``:remaining`` is each step's number of upstreams.  Edges:
    ``:ups``/``:downs`` (step ``downs[i]`` comes after ``ups[i]``).
    """
    arrays: dict[str, Any] = {
        "id": BigInteger,
        "queue": Text,
        "channel": Text,
        "payload": _Payload,
        "priority": Integer,
        "run_at": DateTime(timezone=True),
        "delay": Interval,
        "max_attempts": Integer,
        "visibility_timeout": Interval,
        "expires_in": Interval,
        "unique_key": Text,
        "keep_completed": Interval,
        "grp": Text,
        "remaining": Integer,
    }
    given = (
        func.unnest(*(bindparam(f"p_{name}s", type_=ARRAY(kind)) for name, kind in arrays.items()))
        .table_valued(*arrays)
        .render_derived()
    )
    source = select(
        given.c.id,
        workflow_id_param(),
        given.c.queue,
        given.c.channel,
        word("waiting"),
        given.c.remaining,
        given.c.payload,
        given.c.priority,
        func.coalesce(given.c.run_at, NOW + given.c.delay),
        given.c.max_attempts,
        given.c.visibility_timeout,
        NOW + given.c.expires_in,
        NOW,
        given.c.unique_key,
        given.c.keep_completed,
        given.c.grp,
    )
    columns = [
        "id",
        "workflow_id",
        "queue",
        "channel",
        "state",
        "remaining",
        "payload",
        "priority",
        "run_at",
        "max_attempts",
        "visibility_timeout",
        "expires_at",
        "created_at",
        "unique_key",
        "keep_completed",
        "grp",
    ]
    made = insert(steps).from_select(columns, source).returning(steps.c.id).cte("made")
    pairs = (
        func.unnest(
            bindparam("p_ups", type_=ARRAY(BigInteger)),
            bindparam("p_downs", type_=ARRAY(BigInteger)),
        )
        .table_valued("upstream", "step")
        .render_derived()
    )
    linked = (
        insert(edges)
        .from_select(["upstream", "step"], select(pairs.c.upstream, pairs.c.step))
        .returning(edges.c.step)
        .cte("linked")
    )
    return select(
        select(func.count()).select_from(made).scalar_subquery(),
        select(func.count()).select_from(linked).scalar_subquery(),
    )


@cache
def promote_roots() -> Select[Any]:
    """G1: the steps of ``:workflow_id`` that wait for nothing, into ``jobs``; each
    of their queues woken once (Q26).  The insert's trigger marks them live."""
    source = (
        select(*(steps.c[name] for name in STEP_JOB_COLUMNS), steps.c.workflow_id)
        .where(
            steps.c.workflow_id == workflow_id_param(),
            steps.c.state == word("waiting"),
            steps.c.remaining == literal(0, type_=Integer),
        )
        .order_by(steps.c.id)
    )
    promoted = (
        insert(jobs)
        .from_select([*STEP_JOB_COLUMNS, "workflow_id"], source)
        .returning(jobs.c.id)
        .cte("promoted")
    )
    channels = (
        select(steps.c.channel).where(steps.c.id == promoted.c.id).distinct().subquery("channels")
    )
    woke = select(func.pg_notify(channels.c.channel, word("")).label("woke")).cte("woke")
    return select(
        select(func.count()).select_from(promoted).scalar_subquery(),
        select(func.count()).select_from(woke).scalar_subquery(),
    )


@cache
def taken_keys() -> Select[Any]:
    """G4: ``(queue, unique_key)`` of the pairs given that a live job or a waiting
    step already holds (``:queues``/``:unique_keys``, parallel arrays)."""
    pairs = (
        func.unnest(
            bindparam("p_queues", type_=ARRAY(Text)),
            bindparam("p_unique_keys", type_=ARRAY(Text)),
        )
        .table_valued("queue", "unique_key")
        .render_derived()
    )
    given = select(pairs.c.queue, pairs.c.unique_key).cte("given")
    live = (
        select(jobs.c.id)
        .where(jobs.c.queue == given.c.queue, jobs.c.unique_key == given.c.unique_key)
        .exists()
    )
    waiting = (
        select(steps.c.id)
        .where(
            steps.c.queue == given.c.queue,
            steps.c.unique_key == given.c.unique_key,
            steps.c.state == word("waiting"),
        )
        .exists()
    )
    return select(given.c.queue, given.c.unique_key).where(or_(live, waiting))


@cache
def sweep_finished() -> Select[tuple[int]]:
    """G3: delete the finished workflows with a step on ``:queue`` none of whose
    steps has a row left (live, kept completed, dead), their steps and edges
    with them, in one statement.  Returns the deleted workflows' ids."""
    mine = select(steps.c.workflow_id).where(steps.c.queue == queue_param()).distinct()
    other = steps.alias("other")
    remains = (
        select(other.c.id)
        .where(
            other.c.workflow_id == workflows.c.id,
            or_(
                other.c.state == word("waiting"),
                other.c.state == word("live"),
                select(dead_jobs.c.id).where(dead_jobs.c.id == other.c.id).exists(),
                select(completed_jobs.c.id).where(completed_jobs.c.id == other.c.id).exists(),
            ),
        )
        .exists()
    )
    gone = (
        delete(workflows)
        .where(workflows.c.id.in_(mine), ~remains)
        .returning(workflows.c.id)
        .cte("gone")
    )
    gone_steps = (
        delete(steps)
        .where(steps.c.workflow_id.in_(select(gone.c.id)))
        .returning(steps.c.id)
        .cte("gone_steps")
    )
    gone_edges = (
        delete(edges)
        .where(edges.c.step.in_(select(gone_steps.c.id)))
        .returning(edges.c.step)
        .cte("gone_edges")
    )
    return select(gone.c.id).add_cte(gone_steps, gone_edges)
