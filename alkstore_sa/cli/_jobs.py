"""``alkstore jobs QUEUE``: ``queue.jobs()`` (O1) as a table or as JSON."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
from datetime import datetime
from typing import cast

from .._values.job import Job, JobStatus
from .._values.text import printable
from ..store import Store
from ..tasks._codec import InvalidEnvelope, decode_envelope
from ._app import load_app, opts_for, warn_undeclared
from ._commands import queue_name
from ._db import Database, open_engine

__all__ = ["cmd_jobs", "job_json"]


def _json_value(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):  # Job.errors: JobError values
        return [_json_value(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def job_json(job: Job) -> dict[str, object]:
    """A ``Job`` as JSON: its fields, times as ISO 8601, ``errors`` as a list of
    objects (B2).  A task envelope's payload is shown as the envelope's own JSON
    (V3), any other payload as base64; ``payload_encoding`` says which."""
    out: dict[str, object] = _json_value(job)  # type: ignore[assignment]
    try:
        decode_envelope(job.payload)
    except InvalidEnvelope:
        out["payload_encoding"] = "base64"
    else:  # decodes, so it is JSON
        out["payload"] = json.loads(job.payload)
        out["payload_encoding"] = "json"
    return out


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _error(text: str | None, width: int = 60) -> str:
    if not text:
        return ""
    one_line = " ".join(text.split())  # escaped after the cut: never cut in half
    return printable(one_line if len(one_line) <= width else one_line[: width - 3] + "...")


def _jobs_table(found: list[Job]) -> str:
    header = ["id", "status", "attempts", "priority", "run_at", "died_at", "last_error"]
    rows = [
        [
            str(j.id),
            j.status,
            f"{j.attempts}/{j.max_attempts}",
            str(j.priority),
            _when(j.run_at),
            _when(j.died_at),
            _error(j.last_error),
        ]
        for j in found
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {0, 2, 3}  # numbers
    lines = []
    for r in [header, *rows]:
        cells = [
            f"{c:>{w}}" if i in right else f"{c:<{w}}"
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def cmd_jobs(args: argparse.Namespace, database: Database, schema: str) -> int:
    name = queue_name(args.queue)
    app = None if args.app is None else load_app(args.app, database, schema)
    warn_undeclared(app, [name])
    with open_engine(database) as engine, Store(engine, schema=schema) as store:
        found = store.queue(name, opts_for(app, name)).jobs(
            cast(JobStatus | None, args.status), limit=args.limit, before=args.before
        )
    if args.json:
        print(json.dumps([job_json(j) for j in found]))
    elif not found:
        which = "" if args.status is None else f"{args.status} "
        print(f"no {which}jobs in queue {name!r}")
    else:
        print(_jobs_table(found))
    return 0
