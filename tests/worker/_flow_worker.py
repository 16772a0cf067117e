"""One flow-control worker process (tests/worker/test_f_overlap.py).

Run as ``python tests/worker/_flow_worker.py '<json config>'``: a ``Worker``
(``"kind": "sync"``) or ``AsyncWorker`` over one queue whose handler writes
``clock_timestamp()`` into ``flow_spans`` when it starts and when it ends,
each through its own autocommit engine (so a start survives a kill -9), with
the claim's own database time (its claim deadline less its visibility timeout).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Job, QueueOpts, Store, Worker

START = text(
    "INSERT INTO flow_spans (job_id, attempt, grp, pid, claimed, started)"
    " VALUES (:job_id, :attempt, :grp, :pid, :claimed, clock_timestamp())"
)
END = text(
    "UPDATE flow_spans SET ended = clock_timestamp()"
    " WHERE job_id = :job_id AND attempt = :attempt AND pid = :pid"
)


def main(cfg: dict[str, Any]) -> None:
    log = create_engine(cfg["url"], isolation_level="AUTOCOMMIT", pool_size=8)
    sleep = float(cfg["sleep"])
    opts = QueueOpts(visibility_timeout=cfg["visibility_timeout"])

    def row(job: Job) -> dict[str, Any]:
        return {"job_id": job.id, "attempt": job.attempts, "grp": job.group, "pid": os.getpid()}

    def start_row(job: Job) -> dict[str, Any]:
        assert job.claim_deadline is not None
        claimed = job.claim_deadline - timedelta(seconds=job.visibility_timeout)
        return {**row(job), "claimed": claimed}

    def run(job: Job) -> None:
        with log.connect() as conn:
            conn.execute(START, start_row(job))
        time.sleep(sleep)
        with log.connect() as conn:
            conn.execute(END, row(job))

    worker_kw = {"concurrency": cfg["concurrency"], "poll_interval": 0.2, "sweep_interval": None}
    if cfg["kind"] == "sync":
        with Store(create_engine(cfg["url"], pool_size=10)) as store:
            Worker({store.queue(cfg["queue"], opts): run}, **worker_kw).run()
        return

    async def arun(job: Job) -> None:
        await asyncio.to_thread(run, job)

    async def amain() -> None:
        engine = create_async_engine(cfg["async_url"], pool_size=10)
        store = AsyncStore(engine)
        await AsyncWorker({store.queue(cfg["queue"], opts): arun}, **worker_kw).run()

    asyncio.run(amain())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
