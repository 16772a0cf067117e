"""D3 : a queue of short handlers claims one batch ahead, and gives it back at stop.

End to end against PostgreSQL, both workers: jobs claimed ahead of a free
slot wait held (heartbeated) in the worker; at a stop the ones that never
started go back to pending at once (released, Q27) and nothing stays
``processing``.  The claim sizes themselves are pinned on the virtual clock
(tests/worker/test_worker_timing.py, ``test_claim_ahead_*``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Job, QueueOpts, Store

from .._qtools import sql
from .._workers import KINDS, handler, start_worker, wait_for, worker_class


@pytest.mark.parametrize("kind", KINDS)
def test_q27_claim_ahead_a_stop_gives_back_the_jobs_claimed_ahead_unrun(
    kind: str, database_url: URL, engine: Engine
) -> None:
    with Store(engine) as store:
        store.queue("d3", QueueOpts(max_attempts=5)).enqueue_many([b"x"] * 400)
    ran: list[int] = []
    lock = threading.Lock()

    def work(job: Job) -> None:
        with lock:
            ran.append(job.id)
        time.sleep(0.001)

    def build(s: Any) -> Any:
        return worker_class(kind)(
            {s.queue("d3", QueueOpts(max_attempts=5)): handler(kind, work)},
            concurrency=4,
            poll_interval=0.05,
            handle_signals=False,
        )

    running = start_worker(kind, database_url, build)
    wait_for(lambda: len(ran) >= 60)
    running.stop()
    rows = sql(engine, "SELECT id, status, attempts FROM alkstore.jobs WHERE queue = 'd3'")
    assert not [r for r in rows if r["status"] == "processing"]
    left = {r["id"] for r in rows}
    assert left.isdisjoint(ran)  # what ran was acked; what is left never ran
    assert len(left) + len(set(ran)) == 400  # and nothing was lost
