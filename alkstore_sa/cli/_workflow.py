"""``alkstore workflow ID``: ``store.workflow(ID)`` (G3) and its steps, as text or JSON."""

from __future__ import annotations

import argparse
import json

from .._calls import workflow as _workflow
from .._values.text import printable
from .._values.workflow import WorkflowStatus, WorkflowStepState
from ..store import Store, run_call
from ._db import CliError, Database, open_engine

__all__ = ["cmd_workflow"]

_COUNTS = ("total", "waiting", "pending", "processing", "completed", "dead", "cancelled")


def _json(status: WorkflowStatus, steps: list[WorkflowStepState]) -> str:
    return json.dumps(
        {
            "id": status.id,
            "name": status.name,
            "created_at": status.created_at.isoformat(),
            **{name: getattr(status, name) for name in _COUNTS},
            "finished": status.finished,
            "steps": [
                {"id": s.id, "queue": s.queue, "state": s.state, "after": list(s.after)}
                for s in steps
            ],
        }
    )


def _text(status: WorkflowStatus, steps: list[WorkflowStepState]) -> str:
    counts = ", ".join(f"{name} {getattr(status, name)}" for name in _COUNTS)
    state = "finished" if status.finished else "running"
    lines = [
        f"workflow {status.id} {printable(status.name)!r} ({state}), created "
        f"{status.created_at.isoformat(timespec='seconds')}: {counts}"
    ]
    rows = [["step", "queue", "state", "after"]]
    rows += [[str(s.id), printable(s.queue), s.state, ", ".join(map(str, s.after))] for s in steps]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def cmd_workflow(args: argparse.Namespace, database: Database, schema: str) -> int:
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        status = store.workflow(args.id)
        if status is None:
            raise CliError(f"no workflow {args.id} in schema {schema!r} (or it was swept)")
        steps = run_call(store, _workflow.steps(schema, args.id))
    print(_json(status, steps) if args.json else _text(status, steps))
    return 0
