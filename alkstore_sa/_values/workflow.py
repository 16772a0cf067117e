"""Workflow values (G1-G3): a step being built, a deferred run, a workflow's status."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["MAX_STEPS", "Step", "WorkflowRun", "WorkflowStatus", "WorkflowStepState"]

# G4: the most steps one workflow may have.
MAX_STEPS = 10_000


@dataclass(frozen=True, eq=False, slots=True)
class Step:
    """One step of a ``Workflow`` being built (``wf.add`` / ``wf.add_job``).

    Compared and hashed by identity: a step is a key of ``WorkflowRun.job_ids``.
    ``index`` is its position in its workflow, ``queue`` its queue's name,
    ``label`` the task's name (or the queue's, for a plain job).
    """

    index: int
    queue: str
    label: str
    after: tuple[Step, ...] = field(repr=False, default=())
    owner: object = field(repr=False, default=None)


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A deferred workflow: its id (for ``store.workflow(id)``) and each step's job id."""

    id: int
    job_ids: dict[Step, int]


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """G3: a workflow's steps counted by state, read in one snapshot.

    The states are disjoint and add up to ``total``: ``waiting`` (some
    upstream not acked yet; ``get_job`` shows it ``pending``), ``pending``
    (claimable), ``processing``, ``completed`` (acked, kept or not),
    ``dead``, ``cancelled``.  ``finished``: nothing waiting, pending or
    processing.
    """

    id: int
    name: str
    created_at: datetime
    total: int
    waiting: int
    pending: int
    processing: int
    completed: int
    dead: int
    cancelled: int
    finished: bool


@dataclass(frozen=True, slots=True)
class WorkflowStepState:
    """One step as the dashboard and the CLI list it: id, queue, state, upstream ids."""

    id: int
    queue: str
    state: str
    after: tuple[int, ...]
