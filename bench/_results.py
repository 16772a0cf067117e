"""RS (`--only results`): what keeping results costs, and how soon ``wait()`` returns.

``drain_kept``: D1's drain (claim_batch(n) + ack_batch by ``procs``
processes) over jobs stamped ``keep_completed``, so every ack also inserts
the job into ``completed_jobs`` (R1); its ratio to D1 of the same run is
the extra insert's cost.  ``wait_latency``: a Worker in a process of its
own runs a queue whose jobs keep their result; this process enqueues a job
and waits for it (``Queue.wait``, R3), one at a time, ``rounds`` times: the
wall time from the enqueue's commit to ``wait()`` returning, p50 / p99.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

from alkstore_sa import Job, QueueOpts, Store, Worker

from . import _drain
from ._db import Database
from ._progress import Bar
from ._report import Figure, Figures, Target, _ratio

__all__ = ["WAIT_ROUNDS", "drain_kept", "targets", "wait_latency"]

KEEP = QueueOpts(keep_completed=3600)
QUEUE = "rs"
WAIT_ROUNDS = 1_000  # the 1,000 sequential enqueue-and-wait round trips


def _fill_kept(db: Database, jobs: int) -> None:
    store = Store.from_url(db.sa_url())
    q = store.queue(QUEUE, KEEP)
    for start in range(0, jobs, 5_000):
        q.enqueue_many([b"x" * 16] * min(5_000, jobs - start))
    store.close()


def drain_kept(db: Database, jobs: int, n: int, procs: int, label: str) -> Figure:
    _fill_kept(db, jobs)
    dsn = db.sa_url().render_as_string(hide_password=False)
    result = _drain.drain("alkstore", dsn, QUEUE, n, procs, jobs, label)
    with db.connect() as conn:
        kept = conn.execute("SELECT count(*) FROM alkstore.completed_jobs").fetchone()[0]
    if result.jobs != jobs or kept != jobs:
        raise RuntimeError(f"{label}: drained {result.jobs}, kept {kept}, of {jobs}")
    return Figure("RS", "alkstore", f"n={n}, {procs} procs, every job kept", jobs, result.seconds)


def _worker_main(url: str, ready: Any, stop: Any) -> None:
    store = Store.from_url(url)

    def handler(job: Job) -> bytes:
        return b"done"

    worker = Worker({store.queue(QUEUE, KEEP): handler}, concurrency=4, poll_interval=1.0)
    import threading

    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    ready.set()
    stop.wait()
    worker.stop()
    thread.join(30)
    store.close()


def wait_latency(db: Database, rounds: int, label: str) -> Figure:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    url = db.sa_url().render_as_string(hide_password=False)
    child = ctx.Process(target=_worker_main, args=(url, ready, stop), daemon=True)
    child.start()
    store = Store.from_url(db.sa_url())
    q = store.queue(QUEUE, KEEP)
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{label}: the worker process did not start")
        q.wait(q.enqueue(b"warm"), timeout=30)  # the worker is claiming, LISTEN is up
        bar = Bar(label, rounds)
        samples = []
        started = time.perf_counter()
        for i in range(rounds):
            job_id = q.enqueue(b"w")
            t0 = time.perf_counter()
            job = q.wait(job_id, timeout=30)
            samples.append(time.perf_counter() - t0)
            if job is None or job.result != b"done":
                raise RuntimeError(f"{label}: job {job_id} came back as {job!r}")
            bar.set(i + 1)
        seconds = time.perf_counter() - started
        bar.close(rate=rounds / seconds)
    finally:
        stop.set()
        child.join(30)
        store.close()
    cuts = statistics.quantiles(samples, n=100)
    extra = {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}
    return Figure("RS", "alkstore", "enqueue then wait(), one at a time", rounds, seconds, extra)


def targets(figs: Figures) -> list[Target]:
    """RS's ratio to D1 (n=10) of the same run: reported, the issue sets no bound."""
    kept = figs.find("RS", "alkstore", "n=10")
    if kept is None:
        return []
    plain = figs.find("D1", "alkstore", "n=10")
    return [
        Target(
            "RS every job kept vs D1",
            "report only (the ack's extra insert)",
            _ratio(kept, plain),
            0.0,
            True,
        )
    ]
