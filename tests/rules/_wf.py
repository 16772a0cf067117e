"""Workflows in rule tests, on both faces: a ``Workflow`` for ``qs`` (a ``Store``, or an
``AsyncStore`` seen through ``tests/_api.SyncView``) whose ``defer`` blocks."""

from __future__ import annotations

import inspect
from typing import Any

from alkstore_sa import Workflow, WorkflowRun

from .._api import SyncView


class SyncWorkflow:
    """``Workflow`` over ``qs``: ``add_job`` takes ``qs``'s queues; ``defer`` blocks."""

    def __init__(self, qs: Any, name: str = "wf") -> None:
        self._qs = qs
        store = qs.wrapped if isinstance(qs, SyncView) else qs
        self.wf: Any = Workflow(store, name=name)

    def add_job(self, queue: Any, payload: bytes = b"", **kw: Any) -> Any:
        target = queue.wrapped if isinstance(queue, SyncView) else queue
        return self.wf.add_job(target, payload, **kw)

    def add(self, task: Any, **kw: Any) -> Any:
        return self.wf.add(task, **kw)

    def defer(self, **kw: Any) -> WorkflowRun:
        run = self.wf.defer(**kw)
        if inspect.isawaitable(run):
            run = self._qs._loop.run(run)
        return run  # type: ignore[no-any-return]


def claim_ids(queue: Any, n: int = 100) -> list[int]:
    """Claim up to ``n`` jobs, ack nothing; their ids ascending."""
    return sorted(h.id for h in queue.claim_batch("w", n))


def ack_all(queue: Any, n: int = 100) -> list[int]:
    """Claim and ack every claimable job of ``queue`` (one batch); the ids ascending."""
    handles = queue.claim_batch("w", n)
    for h in handles:
        assert h.ack()
    return sorted(h.id for h in handles)
