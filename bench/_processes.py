"""X1: the drain by N worker processes (``run_processes``), against one process and pgqueuer.

``processes`` (case XP): D2's like-for-like drain -- 50 jobs in flight in
all, as pgqueuer's 5 consumers x batch 10 -- by ``--processes 1``
(concurrency 50) and ``--processes 2`` (25 each), no-op handlers.
``cpu-bound`` (case XC): handlers that burn ``CPU_MS`` of CPU in pure
Python (holding the GIL), 2,000 jobs, 1 process vs 2 (concurrency 8 each),
and one process whose handlers run in a 2-process ``handler_executor`` (X2).
XP also drains with blocking ``SLEEP_MS`` handlers (D3's shape) by 1 and 2
processes, reported against the no-op figure of as many processes.

The children are started and running (every one healthy, its LISTEN up)
on a paused queue before the clock starts: start-up is not throughput.
The clock runs from the resume to the queue being empty (every job run
and acked).  pgqueuer's D2 figure in the same run times its start-up too
(about its first claim): a few ms against seconds of drain.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from alkstore_sa import Job, Store, Worker
from alkstore_sa.worker import ProcessSupervisor

from ._cases import fill
from ._db import Database
from ._progress import Bar
from ._report import Figure, Figures, Target

__all__ = [
    "CPU_JOBS",
    "CPU_MS",
    "IN_FLIGHT",
    "SLEEP_MS",
    "cpu_handler",
    "drain",
    "make_worker",
    "targets",
    "warm",
]

IN_FLIGHT = 50  # D2's like-for-like: what pgqueuer's drain holds at once
CPU_MS = 5.0
CPU_JOBS = 2_000
CPU_CONCURRENCY = 8
SLEEP_MS = 1.0  # D3's blocking handlers
POOL_PROCESSES = 2
QUEUE = "xp"


def _burn(ms: float) -> None:
    end = time.thread_time() + ms / 1000  # CPU time of this thread, not the wall clock
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


def cpu_handler(job: Job) -> None:
    """XC's handler: module-level, so a process pool's child can import it."""
    _burn(float(os.environ["BENCH_XP_CPU_MS"]))


def warm(seconds: float) -> None:
    """A pool child's first call: it imports this module (and so the library) here."""
    time.sleep(seconds)


def make_worker() -> Worker:
    """Each child's worker (imported by name in the spawned process): settings from env."""
    store = Store.from_url(
        os.environ["BENCH_XP_URL"], pool_size=int(os.environ["BENCH_XP_C"]) + 4, max_overflow=4
    )
    burn = float(os.environ.get("BENCH_XP_CPU_MS", "0"))
    nap = float(os.environ.get("BENCH_XP_SLEEP_MS", "0")) / 1000
    pooled = int(os.environ.get("BENCH_XP_POOL", "0"))

    def noop(job: Job) -> None:
        pass

    def blocking(job: Job) -> None:
        time.sleep(nap)

    handler = cpu_handler if burn else blocking if nap else noop
    pool = None
    if pooled:
        pool = ProcessPoolExecutor(pooled, mp_context=multiprocessing.get_context("spawn"))
        # The pool starts its processes on demand and each imports the handler's
        # module at its first job: both now, before the child reports healthy --
        # start-up is not throughput.
        list(pool.map(warm, [0.2] * pooled))
    return Worker(
        {store.queue(QUEUE): handler},
        concurrency=int(os.environ["BENCH_XP_C"]),
        poll_interval=1.0,
        sweep_interval=None,
        handle_signals=False,
        handler_executor=pool,
    )


def machine_busy_seconds() -> float:
    """The machine's busy CPU seconds so far, every core (Linux ``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def _left(db: Database) -> int:
    with db.connect() as conn:
        row = conn.execute("SELECT count(*) FROM alkstore.jobs WHERE queue = %s", [QUEUE])
        found = row.fetchone()
    return int(found[0]) if found else 0


def drain(
    db: Database,
    jobs: int,
    processes: int,
    label: str,
    *,
    cpu_ms: float = 0.0,
    sleep_ms: float = 0.0,
    pool: int = 0,
) -> Figure:
    """One drain of ``jobs`` by ``processes`` children (``pool``: each with a process
    pool of that size as its ``handler_executor``); see the module's docstring."""
    concurrency = CPU_CONCURRENCY if cpu_ms else max(1, IN_FLIGHT // processes)
    store = Store.from_url(db.sa_url(), pool_size=1, max_overflow=0)
    q = store.queue(QUEUE)
    q.pause()
    fill(db, QUEUE, jobs)
    os.environ.update(
        BENCH_XP_URL=db.sa_url().render_as_string(hide_password=False),
        BENCH_XP_C=str(concurrency),
        BENCH_XP_CPU_MS=str(cpu_ms),
        BENCH_XP_SLEEP_MS=str(sleep_ms),
        BENCH_XP_POOL=str(pool),
    )
    supervisor = ProcessSupervisor(make_worker, processes)
    thread = threading.Thread(target=supervisor.run, name="bench-xp", daemon=True)
    thread.start()
    bar = Bar(label, jobs)
    try:
        deadline = time.monotonic() + 120
        while not supervisor.health().healthy:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"{label}: the worker processes did not all start")
            time.sleep(0.05)
        t0, busy0 = time.perf_counter(), machine_busy_seconds()
        q.resume()
        while (left := _left(db)) > 0:
            bar.set(jobs - left)
            time.sleep(0.005)
        t1, busy1 = time.perf_counter(), machine_busy_seconds()
    finally:
        supervisor.stop()
        thread.join(timeout=120)
        store.close()
    bar.set(jobs)
    bar.close(rate=jobs / (t1 - t0))
    # The machine's load when it ended: a shared machine's other work shows here.
    extra = {"loadavg_1m": round(os.getloadavg()[0], 2), "machine_busy_s": busy1 - busy0}
    if cpu_ms:
        shape = f"{processes} proc x c={concurrency}, {cpu_ms:g} ms CPU each"
        if pool:
            shape += f", in a {pool}-process handler_executor"
            return Figure("XC", f"alkstore-pool{pool}", shape, jobs, t1 - t0, extra)
        return Figure("XC", f"alkstore-p{processes}", shape, jobs, t1 - t0, extra)
    work = f"{sleep_ms:g} ms blocking" if sleep_ms else "no-op"
    shape = f"{processes} proc x c={concurrency} ({IN_FLIGHT} in flight), {work}"
    name = f"alkstore-p{processes}" + ("-sleep" if sleep_ms else "")
    return Figure("XP", name, shape, jobs, t1 - t0, extra)


def _ratio(a: Figure | None, b: Figure | None) -> float | None:
    return None if a is None or b is None or b.rate == 0 else a.rate / b.rate


def targets(figs: Figures) -> list[Target]:
    """X1's targets, from figures of this run only (none when XP/XC did not run)."""
    f = figs.find
    out: list[Target] = []
    if f("XP", "alkstore-p2") is not None:
        out.append(
            Target(
                "XP 2 processes vs pgqueuer-asyncpg",
                ">= 2 x pgqueuer-asyncpg's D2 drain (both hold 50 jobs)",
                _ratio(f("XP", "alkstore-p2"), f("D2", "pgqueuer-asyncpg")),
                2.0,
                True,
            )
        )
        out.append(
            Target(
                "XP 2 processes vs 1",
                ">= 1.2 x --processes 1 (50 in flight in all)",
                _ratio(f("XP", "alkstore-p2"), f("XP", "alkstore-p1")),
                1.2,
                True,
            )
        )
    if f("XC", "alkstore-p2") is not None:
        out.append(
            Target(
                "XC cpu-bound 2 processes vs 1",
                f">= 1.6 x one process ({CPU_MS:g} ms CPU handlers, {CPU_JOBS:,} jobs)",
                _ratio(f("XC", "alkstore-p2"), f("XC", "alkstore-p1")),
                1.6,
                True,
            )
        )
    if f("XC", f"alkstore-pool{POOL_PROCESSES}") is not None:
        out.append(
            Target(
                f"XC cpu-bound handler_executor ({POOL_PROCESSES} processes) vs 1 process",
                f">= 1.6 x one process without a pool ({CPU_MS:g} ms CPU handlers)",
                _ratio(f("XC", f"alkstore-pool{POOL_PROCESSES}"), f("XC", "alkstore-p1")),
                1.6,
                True,
            )
        )
    for n in (1, 2):
        if f("XP", f"alkstore-p{n}-sleep") is not None:
            out.append(
                Target(
                    f"XP {SLEEP_MS:g} ms blocking handlers vs no-op, {n} process(es)",
                    ">= 0.8 x the no-op drain of as many processes (D3's target)",
                    _ratio(f("XP", f"alkstore-p{n}-sleep"), f("XP", f"alkstore-p{n}")),
                    0.8,
                    True,
                )
            )
    return out
