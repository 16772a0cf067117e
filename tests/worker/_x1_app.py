"""The worker the X1 tests run in several processes (imported by name in each child).

Its handler writes a ``started`` row at once (committed on its own, so a
child killed mid-job leaves it) and a ``done`` row in the transaction that
acks the job (Q28), both stamped with the child's pid and
``clock_timestamp()``; the tests assert in SQL.  Settings come from the
environment the test gives the supervisor (children inherit it).
"""

from __future__ import annotations

import os
import threading
import time

from sqlalchemy import text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from alkstore_sa import Job, QueueOpts, Store, Worker

TABLE = """
CREATE TABLE IF NOT EXISTS x1_runs (
  job_id bigint NOT NULL, pid int NOT NULL, kind text NOT NULL, at timestamptz NOT NULL
)
"""
RECORD = "INSERT INTO x1_runs VALUES (:job, :pid, :kind, clock_timestamp())"


def _number(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def make_worker() -> Worker:
    store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
    work = _number("X1_WORK", 0.01)
    pid = os.getpid()

    def handle(job: Job, session: Session) -> None:
        with store.engine.begin() as conn:
            conn.execute(text(RECORD), {"job": job.id, "pid": pid, "kind": "started"})
        time.sleep(work)
        session.execute(text(RECORD), {"job": job.id, "pid": pid, "kind": "done"})

    opts = QueueOpts(visibility_timeout=_number("X1_VT", 0.6))
    return Worker(
        {store.queue("x1", opts): handle},
        concurrency=int(_number("X1_CONCURRENCY", 2)),
        poll_interval=0.1,
        shutdown_timeout=_number("X1_GRACE", 5),
        sweep_interval=None,
        vacuum_interval=None,
    )


def make_fixed_id_worker() -> Worker:
    """Every process the same worker id: the supervisor refuses it."""
    store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
    return Worker({store.queue("x1"): lambda job: None}, poll_interval=0.1, worker_id="same")


def make_worker_leaving_a_thread() -> Worker:
    """A factory that leaves a thread running (not a daemon): the child's exit waits for it."""
    threading.Thread(target=time.sleep, args=(3600,), name="left-running").start()
    return make_worker()


def make_nothing() -> object:
    return "not a worker"


def make_missing_schema() -> Worker:
    store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"], schema="x1_nosuch")
    return Worker({store.queue("x1"): lambda job: None}, poll_interval=0.1)


def pooled_record(job: Job) -> None:
    """A process pool's handler (module-level: the pool's child imports it by name)."""
    from sqlalchemy import create_engine

    engine = create_engine(os.environ["ALKSTORE_DATABASE_URL"], poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text(RECORD), {"job": job.id, "pid": os.getpid(), "kind": "done"})
    engine.dispose()


def make_pooled_worker() -> Worker:
    """A worker whose handlers run in a process pool the factory made itself (X2 in X1)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    return Worker(
        {store.queue("x1"): pooled_record},
        concurrency=2,
        poll_interval=0.1,
        sweep_interval=None,
        vacuum_interval=None,
        handler_executor=pool,
    )
