"""Workflows' reads (G1, G3): a waiting step as ``get_job`` shows it, a workflow's
status, its steps and edges (the dashboard, the CLI)."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    LargeBinary,
    Select,
    Text,
    and_,
    bindparam,
    case,
    func,
    null,
    select,
)

from ..._values.job import LIVE_COLUMNS
from ...schema import jobs, workflow_edges, workflow_steps, workflows
from ._common import queue_param
from .workflow import word, workflow_id_param

__all__ = ["waiting_job", "workflow_edges_of", "workflow_status", "workflow_steps_of"]

steps = workflow_steps
edges = workflow_edges


def _waiting_on(step: ColumnElement[int]) -> ColumnElement[Any]:
    """The upstream ids of ``step`` not acked yet, ascending, as a bigint array."""
    upstream = steps.alias("upstream")
    ids = (
        select(edges.c.upstream)
        .join(upstream, upstream.c.id == edges.c.upstream)
        .where(edges.c.step == step, upstream.c.state != word("completed"))
        .order_by(edges.c.upstream)
    )
    return func.array(ids.scalar_subquery())


@cache
def waiting_job() -> Select[Any]:
    """G1: a waiting step of ``:queue`` as ``get_job`` shows it: ``pending``, in
    ``LIVE_COLUMNS`` order, then died_at, result, finished_at (NULL) and
    ``waiting_on``."""
    shown: dict[str, ColumnElement[Any]] = {
        "status": word("pending"),
        "worker_id": null().cast(Text),
        "claim_deadline": null().cast(DateTime(timezone=True)),
    }
    columns = [shown[name] if name in shown else steps.c[name] for name in LIVE_COLUMNS]
    return select(
        *columns,
        null().cast(DateTime(timezone=True)),
        null().cast(LargeBinary),
        null().cast(DateTime(timezone=True)),
        _waiting_on(steps.c.id),
    ).where(
        steps.c.id == bindparam("p_job_id", type_=BigInteger),
        steps.c.queue == queue_param(),
        steps.c.state == word("waiting"),
    )


def _shown_state() -> ColumnElement[str]:
    """G3: a step's state as the status counts it (a live step is pending or
    processing as its row says; a live step with no row left died)."""
    return case(
        (
            steps.c.state == word("live"),
            func.coalesce(jobs.c.status, word("dead")),
        ),
        else_=steps.c.state,
    )


@cache
def workflow_status() -> Select[Any]:
    """G3: ``:workflow_id``'s name, created_at and its steps counted by state."""
    state = _shown_state()
    joined = workflows.join(steps, steps.c.workflow_id == workflows.c.id).outerjoin(
        jobs, and_(jobs.c.id == steps.c.id, steps.c.state == word("live"))
    )

    def counted(name: str) -> ColumnElement[int]:
        return func.count().filter(state == word(name))

    return (
        select(
            workflows.c.id,
            workflows.c.name,
            workflows.c.created_at,
            func.count(),
            *(
                counted(name)
                for name in ("waiting", "pending", "processing", "completed", "dead", "cancelled")
            ),
        )
        .select_from(joined)
        .where(workflows.c.id == workflow_id_param())
        .group_by(workflows.c.id)
    )


@cache
def workflow_steps_of() -> Select[Any]:
    """The dashboard's and the CLI's list of ``:workflow_id``'s steps:
    ``(id, queue, state)`` by id."""
    joined = steps.outerjoin(jobs, and_(jobs.c.id == steps.c.id, steps.c.state == word("live")))
    return (
        select(steps.c.id, steps.c.queue, _shown_state())
        .select_from(joined)
        .where(steps.c.workflow_id == workflow_id_param())
        .order_by(steps.c.id)
    )


@cache
def workflow_edges_of() -> Select[Any]:
    """``(upstream, step)`` of every edge of ``:workflow_id``."""
    return (
        select(edges.c.upstream, edges.c.step)
        .join(steps, steps.c.id == edges.c.step)
        .where(steps.c.workflow_id == workflow_id_param())
        .order_by(edges.c.step, edges.c.upstream)
    )
