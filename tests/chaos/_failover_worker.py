"""One failover worker process: a ``Worker`` (or ``AsyncWorker``) on a multi-host URL.

Run as ``python tests/chaos/_failover_worker.py '<json config>'``.  A failover
loses the tail of the old primary's data, the chaos ledger tables too, so
this worker's ledger of what happened is kept outside the database, in files
of its own (one line per event, appended with one ``write``):

- ``runs``: ``job_id attempt token`` each time a handler starts;
- ``acks``: ``job_id attempt token`` each time a job's ack COMMIT returned
  (the session's ``after_commit``: the handler's effect and the ack commit
  together, Q28).

The handler's effect row (``failover_effects``, with the payload's token)
commits with the ack, so the new primary says which jobs' work it has.
"""

# ruff: noqa: E402 -- the SIGTERM handler below must come before the slow imports
from __future__ import annotations

from tests.chaos import _early_stop

_early_stop.install()  # see _worker_main.py

import asyncio
import faulthandler
import json
import logging
import os
import random
import signal
import sys
import time
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncWorker, Job, Store, Worker

faulthandler.register(signal.SIGUSR1, all_threads=True)

EFFECT = text(
    "INSERT INTO failover_effects (token, job_id, attempt, pid) "
    "VALUES (:token, :job_id, :attempt, :pid)"
)


class Ledger:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, job: Job) -> None:
        os.write(self._fd, f"{job.id} {job.attempts} {job.payload.decode()}\n".encode())


def _row(job: Job) -> dict[str, Any]:
    return {
        "token": job.payload.decode(),
        "job_id": job.id,
        "attempt": job.attempts,
        "pid": os.getpid(),
    }


def _engine_kw() -> dict[str, Any]:
    return {
        "pool_size": 5,
        "max_overflow": 10,
        "pool_pre_ping": True,  # what the docs tell an operator to set
        "connect_args": {"application_name": f"failover-pool-{os.getpid()}"},
    }


def _worker_kw(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "concurrency": cfg.get("concurrency", 8),
        "poll_interval": cfg.get("poll_interval", 0.2),
        "shutdown_timeout": 5,
        "worker_id": f"failover-{os.getpid()}",
    }


def run_sync(cfg: dict[str, Any], runs: Ledger, acks: Ledger) -> None:
    from sqlalchemy import create_engine

    engine = create_engine(cfg["url"], **_engine_kw())

    def handler(job: Job, session: Session) -> None:
        runs.write(job)
        event.listen(session, "after_commit", lambda _s: acks.write(job))
        time.sleep(random.uniform(0, cfg.get("work_ms", 0)) / 1000)
        session.execute(EFFECT, _row(job))

    queue = Store(engine).queue(cfg["queue"])
    worker = Worker({queue: handler}, **_worker_kw(cfg))
    _early_stop.hand_to(worker)
    worker.run()
    engine.dispose()


async def run_async(cfg: dict[str, Any], runs: Ledger, acks: Ledger) -> None:
    engine = create_async_engine(cfg["url"], **_engine_kw())

    async def handler(job: Job, session: AsyncSession) -> None:
        runs.write(job)
        event.listen(session.sync_session, "after_commit", lambda _s: acks.write(job))
        await asyncio.sleep(random.uniform(0, cfg.get("work_ms", 0)) / 1000)
        await session.execute(EFFECT, _row(job))

    queue = AsyncStore(engine).queue(cfg["queue"])
    worker = AsyncWorker({queue: handler}, **_worker_kw(cfg))
    _early_stop.hand_to(worker)
    await worker.run()
    await engine.dispose()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    runs, acks = Ledger(cfg["runs"]), Ledger(cfg["acks"])
    if cfg.get("async"):
        asyncio.run(run_async(cfg, runs, acks))
    else:
        run_sync(cfg, runs, acks)
    print(json.dumps({}), flush=True)


if __name__ == "__main__":
    main()
