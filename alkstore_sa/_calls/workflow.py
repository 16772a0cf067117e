"""Workflows as calls (G1-G4): steps validated as they are added, defer as one call.

Every check G4 names runs here, before any SQL: ``after=`` names steps of
the same workflow only (so a step can only come after steps added before
it, and no cycle can be built), at most ``MAX_STEPS`` steps, each payload
within its queue's cap, each unique key given once per queue.  Whether a
key is live elsewhere is the database's to say: ``_db.workflow.defer``
asks first and writes nothing when one is.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from .._db import workflow as _workflow
from .._db.address import StoreAddress
from .._values import validate as v
from .._values.opts import EnqueueOpts
from .._values.stamps import resolve_stamps
from .._values.workflow import MAX_STEPS, Step, WorkflowRun, WorkflowStatus, WorkflowStepState
from . import Call
from .core import QueueCore

__all__ = ["WorkflowCore", "status", "steps"]

# A workflow's name: free text, like a job's error, bounded.
MAX_NAME_CHARS = 1_000


class WorkflowCore:
    """The steps of one workflow being built, and its defer as a call."""

    __slots__ = ("_planned", "_steps", "address", "name")

    def __init__(self, schema: str, name: object) -> None:
        if not isinstance(name, str):
            raise TypeError(f"a workflow's name must be a str, got {type(name).__name__}")
        if not name.strip() or "\x00" in name or len(name) > MAX_NAME_CHARS:
            raise ValueError(
                f"a workflow's name must be non-blank text of at most {MAX_NAME_CHARS} "
                "characters without NUL"
            )
        self.name = name
        self.address = StoreAddress(schema)
        self._steps: list[Step] = []
        self._planned: list[_workflow.PlannedStep] = []

    def add(
        self,
        core: QueueCore,
        payload: object,
        after: object,
        opts: EnqueueOpts | None,
        label: str,
    ) -> Step:
        """A step of ``core``'s queue; every argument checked here (G4)."""
        if len(self._steps) >= MAX_STEPS:
            raise ValueError(f"workflow {self.name!r}: at most {MAX_STEPS:,} steps")
        if opts is not None and not isinstance(opts, EnqueueOpts):
            raise TypeError(f"opts must be EnqueueOpts, got {type(opts).__name__}")
        data = v.payload(payload)
        limit = core.opts.max_payload_bytes
        if limit is not None and len(data) > limit:
            raise ValueError(
                f"the payload is {len(data):,} bytes, more than queue {core.name!r} takes "
                f"(QueueOpts.max_payload_bytes={limit:,}; None lifts the cap)"
            )
        upstream = self._after(after)
        stamps = resolve_stamps(core.opts, opts)
        key = None if opts is None else opts.unique_key
        if key is not None and any(
            p.unique_key == key and p.queue == core.name for p in self._planned
        ):
            raise ValueError(
                f"workflow {self.name!r}: unique key {key!r} is given twice on queue {core.name!r}"
            )
        step = Step(len(self._steps), core.name, label, upstream, self)
        self._steps.append(step)
        self._planned.append(
            _workflow.PlannedStep(
                queue=core.name,
                channel=core.address.channel,
                payload=data,
                priority=stamps.priority,
                run_at=stamps.run_at,
                delay=stamps.delay,
                max_attempts=stamps.max_attempts,
                visibility_timeout=stamps.visibility_timeout,
                expires_in=stamps.expires_in,
                unique_key=key,
                keep_completed=stamps.keep_completed,
                grp=None if opts is None else opts.group,
                after=tuple(s.index for s in upstream),
            )
        )
        return step

    def _after(self, after: object) -> tuple[Step, ...]:
        if isinstance(after, Step) or not isinstance(after, Iterable):
            raise TypeError("after= takes a list of Steps")
        seen: dict[int, Step] = {}
        for step in after:
            if not isinstance(step, Step):
                raise TypeError(f"after= takes Steps, got {type(step).__name__}")
            if step.owner is not self:
                raise ValueError(
                    f"workflow {self.name!r}: after= names a step of another workflow ({step!r})"
                )
            seen.setdefault(step.index, step)  # a step named twice is one edge
        return tuple(seen[i] for i in sorted(seen))

    def defer(self) -> Call[tuple[int, list[int]]]:
        """G1: the call that writes every step (run it in one transaction)."""
        if not self._planned:
            raise ValueError(f"workflow {self.name!r} has no steps")
        return partial(
            _workflow.defer, address=self.address, name=self.name, planned=list(self._planned)
        )

    def run(self, deferred: tuple[int, list[int]]) -> WorkflowRun:
        """The ``WorkflowRun`` of what ``defer()``'s call returned."""
        workflow_id, ids = deferred
        return WorkflowRun(workflow_id, dict(zip(self._steps, ids, strict=True)))


def status(schema: str, run_id: object) -> Call[WorkflowStatus | None]:
    """G3: ``store.workflow(run_id)``."""
    return partial(_workflow.status, address=StoreAddress(schema), workflow_id=v.job_id(run_id))


def steps(schema: str, run_id: object) -> Call[list[WorkflowStepState]]:
    """A workflow's steps, states and edges (the dashboard, ``alkstore workflow``)."""
    return partial(_workflow.steps, address=StoreAddress(schema), workflow_id=v.job_id(run_id))
