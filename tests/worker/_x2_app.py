"""Handlers the X2 tests run in a process pool (pickled by name, so module-level).

Each appends one line per run to the file named in its payload (JSON), so
the test counts runs across processes; ``hold`` computes in one C call
(``sum`` over a ``range``), which keeps the GIL for its whole length -- not
even the interpreter's 5 ms switch interval lets another thread of its
process in, as a pure-Python loop would.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from alkstore_sa import FailJob, Job, SnoozeJob, Store, Worker


def payload(path: str, **more: Any) -> bytes:
    return json.dumps({"path": path, **more}).encode()


def _ran(job: Job) -> dict[str, Any]:
    args: dict[str, Any] = json.loads(job.payload)
    with open(args["path"], "a") as f:
        f.write(f"{job.attempts} {job.id} {os.getpid()}\n")
    return args


def hold(job: Job) -> None:
    """Hold the GIL for at least ``seconds``: a sum measured first, then one long one.

    The rate is the best of three short sums: one slowed by a busy machine
    (CI runs the suite two processes to a core) would size the long sum short.
    """
    args = _ran(job)
    n = 1_000_000
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        sum(range(n))
        best = min(best, time.perf_counter() - began)
    sum(range(int(n / max(best, 1e-6) * args["seconds"])))
    _lease_at_end(job, args)


def _lease_at_end(job: Job, args: dict[str, Any]) -> None:
    """Append ``held`` or ``lapsed``: whether the job's claim was still unexpired in the
    database when its handler finished (heartbeats extend it while it runs; a
    lapsed one may be buried already, Q12)."""
    engine = create_engine(args["url"], poolclass=NullPool)
    try:
        with engine.connect() as conn:
            held = conn.execute(
                text(
                    "SELECT EXISTS (SELECT FROM alkstore.jobs"
                    " WHERE id = :id AND claim_deadline > clock_timestamp())"
                ),
                {"id": job.id},
            ).scalar_one()
    finally:
        engine.dispose()
    with open(args["path"] + ".lease", "a") as f:
        f.write("held\n" if held else "lapsed\n")


def die_once(job: Job) -> None:
    """Kill its own process on the first attempt (a child dying mid-job)."""
    _ran(job)
    if job.attempts == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def outcomes(job: Job) -> bytes | None:
    """Return or raise what the payload's ``do`` says: the outcome crosses back pickled."""
    do = _ran(job)["do"]
    if do == "fail":
        raise FailJob("refused in the child")
    if do == "snooze":
        raise SnoozeJob(3600)
    if do == "boom":
        raise ValueError("boom in the child")
    return f"done in {os.getpid()}".encode()


def make_worker() -> Worker:
    """The CLI's target (``--handler-processes``)."""
    store = Store(create_engine(os.environ["ALKSTORE_DATABASE_URL"]))
    return Worker({store.queue("x2cli"): outcomes})
