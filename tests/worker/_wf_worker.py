"""A worker process for the workflow order tests: ``python _wf_worker.py URL KIND QUEUE VT``.

Every handler start is logged in ``wf_starts`` (job id, ``clock_timestamp()``)
through an engine of its own in autocommit, so the log survives a kill -9.
The steps carry keep_completed, so each ack's time is its kept row's
``finished_at`` (the ack statement's clock): the test compares the two in SQL.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Job, QueueOpts, Store, Worker

START = text("INSERT INTO wf_starts (job_id, pid, at) VALUES (:job_id, :pid, clock_timestamp())")


def main() -> None:
    url, kind, queue_name, vt = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    log = create_engine(url, isolation_level="AUTOCOMMIT", pool_size=2)
    opts = QueueOpts(visibility_timeout=vt, max_attempts=100)

    def record(job: Job) -> None:
        with log.connect() as conn:
            conn.execute(START, {"job_id": job.id, "pid": os.getpid()})
        time.sleep(random.random() * 0.004)

    kw: dict[str, Any] = {"concurrency": 4, "poll_interval": 0.2, "shutdown_timeout": 2}
    if kind == "sync":
        store = Store(create_engine(url, pool_size=6))
        Worker({store.queue(queue_name, opts): record}, **kw).run()
        return

    async def amain() -> None:
        astore = AsyncStore(create_async_engine(url.replace("+psycopg", "+asyncpg"), pool_size=6))

        async def arecord(job: Job) -> None:
            await asyncio.to_thread(record, job)

        await AsyncWorker({astore.queue(queue_name, opts): arecord}, **kw).run()

    asyncio.run(amain())


if __name__ == "__main__":
    main()
