"""D2 (a Worker drains 20,000 no-op jobs) and L1 (wake latency), for alkstore_sa.

D2 is timed from ``run()`` to the moment the queue is empty (every job
handled *and* acked), so the worker's start-up and its batched acks count,
as pgqueuer's start-up and its log writes count in its drain.

L1: a worker with a long ``poll_interval`` (so only LISTEN/NOTIFY can wake
it) waits on an empty queue; one job at a time is enqueued on another
engine's connection; the latency is from the enqueue call to the handler's
first line (``perf_counter`` in both threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, Job, QueueOpts, Store
from alkstore_sa.worker import AsyncWorker, Worker

from ._cases import PAYLOAD, async_system, fill
from ._db import Database
from ._progress import Bar
from ._report import Figure

CONCURRENCY = 10


def _wait_empty(db: Database, queue: str, timeout: float = 60.0) -> float:
    """Poll (only once every handler ran) until the batched acks emptied the queue."""
    deadline = time.perf_counter() + timeout
    with db.connect() as conn:
        while time.perf_counter() < deadline:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM alkstore.jobs WHERE queue = %s)", [queue]
            ).fetchone()
            if row is not None and not row[0]:
                return time.perf_counter()
            time.sleep(0.002)
    raise RuntimeError(f"queue {queue!r} not empty {timeout}s after its handlers ran")


class _Counter:
    def __init__(self, total: int, bar: Bar) -> None:
        self.total = total
        self.done = 0
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.bar = bar

    def hit(self) -> None:
        with self.lock:
            self.done += 1
            done = self.done
        if done % 100 == 0 or done == self.total:
            self.bar.set(done)
        if done == self.total:
            self.finished.set()


# pgqueuer's drain (5 consumers x batch 10) holds this many jobs at once: a
# Worker of this concurrency is its like-for-like shape (shown for reference).
PGQ_IN_FLIGHT = 50


@contextlib.contextmanager
def _prometheus(on: bool, jobs: int, label: str) -> Iterator[None]:
    """B4: with ``on``, the worker runs with ``prometheus.instrument()`` installed (a
    registry of its own), and every job must have been counted as acked."""
    if not on:
        yield
        return
    from prometheus_client import CollectorRegistry

    from alkstore_sa import prometheus

    registry = CollectorRegistry()
    prometheus.instrument(registry)
    try:
        yield
        acked = registry.get_sample_value(
            "alkstore_worker_jobs_total", {"queue": "d2", "outcome": "acked"}
        )
        if acked != jobs:
            raise RuntimeError(f"{label}: the metrics counted {acked} acks of {jobs} jobs")
    finally:
        prometheus.uninstrument(registry)


def d2(
    db: Database,
    jobs: int,
    label: str,
    concurrency: int = CONCURRENCY,
    *,
    prometheus: bool = False,
    case: str = "D2",
    sleep: float = 0.0,
) -> Figure:
    """One sync ``Worker`` (concurrency 10 unless given), no-op handler.

    ``prometheus``: with the B4 worker metrics installed (``case`` names the
    figure, so the B4 A/B runs do not read as D2's)."""
    fill(db, "d2", jobs)
    engine = create_engine(db.sa_url(), pool_size=concurrency + 4, max_overflow=4)
    store = Store(engine)
    bar = Bar(label, jobs)
    counter = _Counter(jobs, bar)

    def noop(job: Job) -> None:
        counter.hit()

    def io_bound(job: Job) -> None:
        time.sleep(sleep)
        counter.hit()

    worker = Worker(
        {store.queue("d2"): io_bound if sleep else noop},
        concurrency=concurrency,
        poll_interval=1.0,
        handle_signals=False,
    )
    with _prometheus(prometheus, jobs, label):
        c0 = time.process_time()
        t0 = time.perf_counter()
        thread = threading.Thread(target=worker.run, name="bench-d2-worker")
        thread.start()
        try:
            if not counter.finished.wait(timeout=600):
                raise RuntimeError(f"{label}: ran {counter.done} of {jobs} jobs in 600 s")
            t1 = _wait_empty(db, "d2")
            c1 = time.process_time()
        finally:
            worker.stop()
            thread.join(timeout=60)
            engine.dispose()
    bar.close(rate=jobs / (t1 - t0))
    cpu = {"cpu_us_per_job": (c1 - c0) / jobs * 1e6}  # this process: the worker's CPU
    if case == "D3":
        handler = f"sleep {sleep * 1000:g} ms" if sleep else "no-op"
        return Figure("D3", "alkstore", f"Worker c={concurrency}, {handler}", jobs, t1 - t0, cpu)
    if case != "D2":
        system = "alkstore+prometheus" if prometheus else "alkstore"
        return Figure(case, system, f"Worker c={concurrency}", jobs, t1 - t0, cpu)
    if concurrency == CONCURRENCY:
        shape = f"1 Worker, concurrency {concurrency}"
        return Figure("D2", "alkstore", shape, jobs, t1 - t0, cpu)
    shape = f"1 Worker, concurrency {concurrency} (ref.)"
    return Figure("D2", f"alkstore-c{concurrency}", shape, jobs, t1 - t0, cpu)


def d2_async(
    db: Database,
    jobs: int,
    label: str,
    *,
    prometheus: bool = False,
    case: str = "D2",
    driver: str = "psycopg",
    concurrency: int = CONCURRENCY,
    sleep: float = 0.0,
) -> Figure:
    """The same drain by an ``AsyncWorker`` with an async no-op handler (for reference);
    ``driver``: its engine's (D1); ``sleep``: the handler awaits that long (D3)."""
    fill(db, "d2", jobs)
    bar = Bar(label, jobs)
    counter = _Counter(jobs, bar)

    async def go() -> tuple[float, float, float]:
        engine = create_async_engine(
            db.async_url(driver), pool_size=concurrency + 4, max_overflow=4
        )
        astore = AsyncStore(engine)

        async def noop(job: Job) -> None:
            counter.hit()

        async def io_bound(job: Job) -> None:
            await asyncio.sleep(sleep)
            counter.hit()

        worker = AsyncWorker(
            {astore.queue("d2"): io_bound if sleep else noop},
            concurrency=concurrency,
            poll_interval=1.0,
            handle_signals=False,
        )
        c0 = time.process_time()
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        try:
            while not counter.finished.is_set():
                if task.done():
                    task.result()
                    raise RuntimeError(f"{label}: the worker stopped early")
                await asyncio.sleep(0.005)
            t1 = await asyncio.to_thread(_wait_empty, db, "d2")
            cpu = (time.process_time() - c0) / jobs * 1e6
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)
            await engine.dispose()
        return t0, t1, cpu

    with _prometheus(prometheus, jobs, label):
        t0, t1, cpu = asyncio.run(go())
    bar.close(rate=jobs / (t1 - t0))
    if case == "D3":
        handler = f"sleep {sleep * 1000:g} ms" if sleep else "no-op"
        shape = f"AsyncWorker c={concurrency}, {handler}"
        return Figure("D3", "alkstore-async", shape, jobs, t1 - t0, {"cpu_us_per_job": cpu})
    if case != "D2":
        system = "alkstore+prometheus" if prometheus else "alkstore"
        shape = f"AsyncWorker c={CONCURRENCY}"
        return Figure(case, system, shape, jobs, t1 - t0, {"cpu_us_per_job": cpu})
    shape = f"1 AsyncWorker, concurrency {CONCURRENCY}"
    return Figure("D2", async_system(driver), shape, jobs, t1 - t0, {"cpu_us_per_job": cpu})


def l1(
    db: Database, samples: int, label: str, *, use_async: bool = False, driver: str = "psycopg"
) -> Figure:
    """Enqueue -> handler start, one job at a time, wake path only.

    ``use_async``: an ``AsyncWorker`` with an async handler (its own loop in a
    thread) instead of a ``Worker``; the enqueues come from a sync ``Store``
    on another engine either way.
    """
    producer = Store(create_engine(db.sa_url(), pool_size=1, max_overflow=0))
    started: list[float] = []
    ran = threading.Event()
    # The re-poll never fires: only the wake path counts.
    settings: dict[str, Any] = {
        "concurrency": CONCURRENCY,
        "poll_interval": 3600.0,
        "handle_signals": False,
    }
    if use_async:
        async_engine = create_async_engine(db.async_url(driver), pool_size=CONCURRENCY + 4)

        async def async_handler(job: Job) -> None:
            started.append(time.perf_counter())
            ran.set()

        aworker = AsyncWorker({AsyncStore(async_engine).queue("l1"): async_handler}, **settings)

        async def serve() -> None:
            try:
                await aworker.run()
            finally:
                await async_engine.dispose()

        worker: Worker | AsyncWorker = aworker
        thread = threading.Thread(target=asyncio.run, args=(serve(),), name="bench-l1-worker")
    else:
        worker_engine = create_engine(db.sa_url(), pool_size=CONCURRENCY + 4, max_overflow=4)

        def handler(job: Job) -> None:
            started.append(time.perf_counter())
            ran.set()

        sworker = Worker({Store(worker_engine).queue("l1"): handler}, **settings)
        worker = sworker
        thread = threading.Thread(target=sworker.run, name="bench-l1-worker")
    thread.start()
    q = producer.queue("l1")
    from_call: list[float] = []
    from_commit: list[float] = []
    bar = Bar(label, samples)
    try:
        # Warm-up (not recorded): the first claim right after LISTEN, statement
        # caches on both sides, and proof that the wake path works at all.
        for _ in range(10):
            _one(q, ran, label)
        del started[:]
        for _ in range(samples):
            ran.clear()
            t0 = time.perf_counter()
            q.enqueue(PAYLOAD)
            t1 = time.perf_counter()
            if not ran.wait(timeout=10):
                raise RuntimeError(f"{label}: a job was not started within 10 s of its enqueue")
            from_call.append(started[-1] - t0)
            from_commit.append(started[-1] - t1)
            bar.advance()
            time.sleep(0.002)  # let the ack go out before the next sample
    finally:
        worker.stop()
        thread.join(timeout=60)
        if not use_async:
            worker_engine.dispose()
        producer.engine.dispose()
    ms = sorted(x * 1000 for x in from_call)
    extra = {
        "p50_ms": statistics.median(ms),
        "p99_ms": _pct(ms, 99),
        "max_ms": ms[-1],
        "p50_after_commit_ms": statistics.median(x * 1000 for x in from_commit),
    }
    bar.close(note=f"p50 {extra['p50_ms']:.2f} ms, p99 {extra['p99_ms']:.2f} ms")
    system, shape = (async_system(driver), "AsyncWorker") if use_async else ("alkstore", "Worker")
    shape = f"enqueue -> {shape} handler start"
    return Figure("L1", system, shape, samples, sum(from_call), extra)


def _one(q: Any, ran: threading.Event, label: str) -> None:
    ran.clear()
    q.enqueue(PAYLOAD)
    if not ran.wait(timeout=10):
        raise RuntimeError(f"{label}: the worker did not wake for a warm-up job")


def _pct(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


H1_CONCURRENCY = 50
H1_VISIBILITY = 0.3  # seconds: a beat every 0.1 s (a third of it)
H1_HANDLER = 0.5  # seconds each job runs: four or five beats per job


def h1(db: Database, jobs: int, label: str) -> Figure:
    """H1: the share of heartbeat updates PostgreSQL made HOT, in a drain of long jobs.

    A Worker (concurrency 50) runs jobs that outlive their visibility timeout
    several times over, so heartbeats keep them.  The jobs table's counters
    are reset first and read once the worker's connections have closed (a
    backend reports its counts on exit).  A claim changes ``status`` (a
    column of the partial indexes' predicates) and is never HOT, so the
    heartbeat updates are all updates but the claims, and the HOT share of
    heartbeats is HOT updates / heartbeat updates.
    """
    engine = create_engine(db.sa_url(), pool_size=H1_CONCURRENCY + 4, max_overflow=4)
    store = Store(engine)
    q = store.queue("h1", QueueOpts(visibility_timeout=H1_VISIBILITY))
    for start in range(0, jobs, 5_000):
        q.enqueue_many([PAYLOAD] * min(5_000, jobs - start))
    with db.connect() as conn:
        conn.execute("SELECT pg_stat_reset_single_table_counters('alkstore.jobs'::regclass)")
    bar = Bar(label, jobs)
    counter = _Counter(jobs, bar)

    def long_job(job: Job) -> None:
        time.sleep(H1_HANDLER)
        counter.hit()

    worker = Worker(
        {q: long_job}, concurrency=H1_CONCURRENCY, poll_interval=1.0, handle_signals=False
    )
    t0 = time.perf_counter()
    thread = threading.Thread(target=worker.run, name="bench-h1-worker")
    thread.start()
    try:
        if not counter.finished.wait(timeout=600):
            raise RuntimeError(f"{label}: ran {counter.done} of {jobs} jobs in 600 s")
        t1 = _wait_empty(db, "h1")
    finally:
        worker.stop()
        thread.join(timeout=60)
        engine.dispose()
    bar.close(rate=jobs / (t1 - t0))
    updates, hot = _settled_update_counts(db)
    beats = updates - counter.done  # one claim per run (a lapse would add a run)
    share = hot / beats if beats > 0 else 0.0
    extra = {"heartbeat_updates": float(beats), "hot_updates": float(hot), "hot_share": share}
    return Figure("H1", "alkstore", f"Worker c={H1_CONCURRENCY}, long jobs", jobs, t1 - t0, extra)


def _settled_update_counts(db: Database) -> tuple[int, int]:
    """(n_tup_upd, n_tup_hot_upd) of jobs once the counts stop moving (backends exit)."""
    last: tuple[int, int] | None = None
    with db.connect() as conn:
        for _ in range(50):
            time.sleep(0.1)
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                " WHERE schemaname = 'alkstore' AND relname = 'jobs'"
            ).fetchone()
            now = (int(row[0]), int(row[1])) if row is not None else (0, 0)
            if now == last and now[0] > 0:
                return now
            last = now
    return last or (0, 0)
