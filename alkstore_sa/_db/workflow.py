"""Workflows over a sync ``Connection`` (G1-G4): defer, status, a waiting step, the sweep."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from .._values.job import Job, shown_row
from .._values.workflow import WorkflowStatus, WorkflowStepState
from .address import StoreAddress
from .execute import fetch
from .sql import workflow as wf_sql
from .sql import workflow_reads as wf_reads

__all__ = ["PlannedStep", "defer", "status", "steps", "sweep_finished", "with_waiting_on"]


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """A step as defer writes it: validated, stamps resolved (Q4), upstreams by index."""

    queue: str
    channel: str
    payload: bytes
    priority: int
    run_at: datetime | None
    delay: timedelta
    max_attempts: int
    visibility_timeout: timedelta
    expires_in: timedelta | None
    unique_key: str | None
    keep_completed: timedelta | None
    grp: str | None  # F3: the step's group (EnqueueOpts.group)
    after: tuple[int, ...]


def _jobs_table(address: StoreAddress) -> str:
    """The jobs table's name as ``pg_get_serial_sequence`` reads it (a bound value)."""
    return '"' + address.schema.replace('"', '""') + '".jobs'


def defer(
    conn: Connection, *, address: StoreAddress, name: str, planned: list[PlannedStep]
) -> tuple[int, list[int]]:
    """G1: write every step in the connection's transaction; (workflow id, job ids).

    Three statements (key check first when any step has a unique key, so a
    taken key writes nothing): the workflow and the ids, the steps and
    edges, the root steps into ``jobs``.  The caller runs it in one
    transaction (its own session's, or one the store opens).
    """
    keyed = [(p.queue, p.unique_key) for p in planned if p.unique_key is not None]
    if keyed:
        asked = {"p_queues": [q for q, _ in keyed], "p_unique_keys": [k for _, k in keyed]}
        taken = fetch(conn, address, wf_sql.taken_keys(), asked)
        if taken:
            shown = ", ".join(f"{k!r} on queue {q!r}" for q, k in sorted(tuple(r) for r in taken))
            raise ValueError(f"workflow {name!r}: unique key(s) already live: {shown}")
    drawn = fetch(
        conn,
        address,
        wf_sql.draw_ids(),
        {"p_name": name, "p_jobs_table": _jobs_table(address), "p_n": len(planned)},
    )
    workflow_id = int(drawn[0][0])
    ids = sorted(int(row[2]) for row in drawn)
    ups: list[int] = []
    downs: list[int] = []
    for i, step in enumerate(planned):
        for j in step.after:
            ups.append(ids[j])
            downs.append(ids[i])
    params: dict[str, Any] = {
        "p_workflow_id": workflow_id,
        "p_ids": ids,
        "p_ups": ups,
        "p_downs": downs,
        "p_remainings": [len(p.after) for p in planned],
    }
    for column in (
        "queue",
        "channel",
        "payload",
        "priority",
        "run_at",
        "delay",
        "max_attempts",
        "visibility_timeout",
        "expires_in",
        "unique_key",
        "keep_completed",
        "grp",
    ):
        params[f"p_{column}s"] = [getattr(p, column) for p in planned]
    fetch(conn, address, wf_sql.insert_steps(), params)
    fetch(conn, address, wf_sql.promote_roots(), {"p_workflow_id": workflow_id})
    return workflow_id, ids


def status(conn: Connection, *, address: StoreAddress, workflow_id: int) -> WorkflowStatus | None:
    """G3: the workflow's counts, or None when there is no such workflow (or it was swept)."""
    rows = fetch(conn, address, wf_reads.workflow_status(), {"p_workflow_id": workflow_id})
    if not rows:
        return None
    id_, name, created_at, total, waiting, pending, processing, completed, dead, cancelled = rows[0]
    return WorkflowStatus(
        id=id_,
        name=name,
        created_at=created_at,
        total=total,
        waiting=waiting,
        pending=pending,
        processing=processing,
        completed=completed,
        dead=dead,
        cancelled=cancelled,
        finished=waiting + pending + processing == 0,
    )


def steps(conn: Connection, *, address: StoreAddress, workflow_id: int) -> list[WorkflowStepState]:
    """Every step of the workflow with its state and the ids it comes after, by id."""
    params = {"p_workflow_id": workflow_id}
    after: dict[int, list[int]] = {}
    for upstream, step in fetch(conn, address, wf_reads.workflow_edges_of(), params):
        after.setdefault(step, []).append(upstream)
    return [
        WorkflowStepState(id_, queue, state, tuple(after.get(id_, ())))
        for id_, queue, state in fetch(conn, address, wf_reads.workflow_steps_of(), params)
    ]


def with_waiting_on(row: Sequence[Any]) -> Job:
    """``get_job``'s row (the read shape, then ``waiting_on``) as a ``Job``."""
    *shape, waiting_on = row
    job = shown_row(shape)
    return job if waiting_on is None else replace(job, waiting_on=tuple(waiting_on))


def sweep_finished(conn: Connection, *, address: StoreAddress, queue: str) -> int:
    """G3: delete this queue's finished workflows none of whose steps has a row left."""
    return len(fetch(conn, address, wf_sql.sweep_finished(), {"p_queue": queue}))
