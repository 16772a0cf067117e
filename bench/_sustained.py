"""L2: a sustained run at a fixed offered rate, sampled every ``sample_every`` seconds.

One process: a producer thread enqueues ``rate`` jobs a second (a batch
every 10 ms, on a schedule, so a slow enqueue is caught up rather than
lowering the rate) and one ``Worker`` (concurrency 64) runs them.  Most
handlers sleep 0-50 ms; one job in fifty sleeps 1-3 s, past its 1 s
visibility timeout, so heartbeats keep it (a beat every third of a
second).  Each sample window reports:

- claim latency p50/p99: the worker's claim calls (the port's ``claim``,
  timed around the call: the round trip and the statement);
- end-to-end latency p50/p99: the enqueue call's start to the handler's
  first line (``time.time()`` carried in the payload);
- ``n_dead_tup`` of ``alkstore.jobs`` (``pg_stat_user_tables``), read every
  second: the window's median and maximum (a reading once per window
  would fall at one phase of the vacuums' sawtooth), ``n_live_tup`` and
  the vacuum and autovacuum runs so far.

Trend: a least-squares slope of each latency over the run's second half
(the first half warms up caches and autovacuum).  With matplotlib (the
``bench`` extra) the samples are also drawn into a PNG.
"""

from __future__ import annotations

import functools
import statistics
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from alkstore_sa import Job, QueueOpts, Store
from alkstore_sa.worker import Worker, _store_port

from ._db import Database
from ._progress import say
from ._report import Figure

CONCURRENCY = 64
VISIBILITY = 1.0
SHORT = (0.0, 0.05)  # seconds most handlers sleep (uniform)
LONG = (1.0, 3.0)  # ... and one in LONG_EVERY, kept alive by heartbeats
LONG_EVERY = 50
TICK = 0.01  # the producer enqueues a batch every TICK seconds
QUEUE = "l2"


@dataclass
class Sample:
    t: float  # seconds since the run started (end of the window)
    claim_p50_ms: float
    claim_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    dead_tup: int  # median of the window's readings
    dead_tup_max: int
    live_tup: int
    vacuums: int  # VACUUMs so far (the workers')
    autovacuums: int
    jobs: int  # handled in the window


@dataclass
class _Window:
    lock: threading.Lock = field(default_factory=threading.Lock)
    claims: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)

    def take(self) -> tuple[list[float], list[float]]:
        with self.lock:
            claims, e2e = self.claims, self.e2e
            self.claims, self.e2e = [], []
        return claims, e2e


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _timed_claims(window: _Window) -> Callable[[], None]:
    """Time the Worker's claim calls (bench instrumentation); returns the undo."""
    original = _store_port.StorePort.claim

    @functools.wraps(original)
    async def claim(self: Any, worker_id: str, n: int, *args: Any, **kwargs: Any) -> list[Job]:
        t0 = time.perf_counter()
        try:
            result: Awaitable[list[Job]] = original(self, worker_id, n, *args, **kwargs)
            return await result
        finally:
            took = time.perf_counter() - t0
            with window.lock:
                window.claims.append(took)

    _store_port.StorePort.claim = claim  # type: ignore[method-assign]

    def undo() -> None:
        _store_port.StorePort.claim = original  # type: ignore[method-assign]

    return undo


def _table_stats(db: Database) -> tuple[int, int, int, int]:
    """(n_dead_tup, n_live_tup, vacuum_count, autovacuum_count) of the jobs table, now."""
    with db.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_dead_tup, n_live_tup, vacuum_count, autovacuum_count"
            " FROM pg_stat_user_tables WHERE schemaname = 'alkstore' AND relname = 'jobs'"
        ).fetchone()
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3])) if row else (0, 0, 0, 0)


def l2(
    db: Database,
    seconds: float,
    rate: int,
    sample_every: float,
    label: str,
    plot: Path | None = None,
) -> tuple[Figure, list[Sample]]:
    producer_store = Store(create_engine(db.sa_url(), pool_size=2, max_overflow=0))
    worker_engine = create_engine(db.sa_url(), pool_size=CONCURRENCY + 4, max_overflow=4)
    opts = QueueOpts(visibility_timeout=VISIBILITY)
    window = _Window()
    handled = [0]

    def handler(job: Job) -> None:
        (sent, pause) = struct.unpack("dd", job.payload)
        with window.lock:
            window.e2e.append(time.time() - sent)
            handled[0] += 1
        time.sleep(pause)

    worker = Worker(
        {Store(worker_engine).queue(QUEUE, opts): handler},
        concurrency=CONCURRENCY,
        poll_interval=1.0,
        handle_signals=False,
    )
    undo = _timed_claims(window)
    stop = threading.Event()
    enqueued = [0]

    def produce() -> None:
        import random

        rng = random.Random(2)
        q = producer_store.queue(QUEUE, opts)
        per_tick = rate * TICK
        start = time.perf_counter()
        due = 0.0
        tick = 0
        while not stop.is_set():
            tick += 1
            due += per_tick
            due_n = int(due)
            n = due_n - enqueued[0]
            if n > 0:
                now = time.time()
                spans = (LONG if i % LONG_EVERY == 0 else SHORT for i in range(enqueued[0], due_n))
                q.enqueue_many([struct.pack("dd", now, rng.uniform(*span)) for span in spans])
                enqueued[0] += n
            wait = start + tick * TICK - time.perf_counter()
            if wait > 0:
                stop.wait(wait)

    runner = threading.Thread(target=worker.run, name="bench-l2-worker")
    feeder = threading.Thread(target=produce, name="bench-l2-producer")
    samples: list[Sample] = []
    runner.start()
    t0 = time.perf_counter()
    feeder.start()
    try:
        next_sample = t0 + sample_every
        end = t0 + seconds
        while True:
            readings: list[int] = []
            while (left := next_sample - time.perf_counter()) > 0:
                time.sleep(min(1.0, left))
                readings.append(_table_stats(db)[0])
            claims, e2e = window.take()
            dead, live, vacuums, autovacuums = _table_stats(db)
            readings.append(dead)
            with window.lock:
                jobs, handled[0] = handled[0], 0
            s = Sample(
                round(time.perf_counter() - t0, 1),
                _pct(claims, 0.5),
                _pct(claims, 0.99),
                _pct(e2e, 0.5),
                _pct(e2e, 0.99),
                int(statistics.median(readings)),
                max(readings),
                live,
                vacuums,
                autovacuums,
                jobs,
            )
            samples.append(s)
            say(
                f"{label}: t={s.t:6.1f}s jobs={s.jobs} claim p50/p99 {s.claim_p50_ms:.2f}/"
                f"{s.claim_p99_ms:.2f} ms, e2e p50/p99 {s.e2e_p50_ms:.1f}/{s.e2e_p99_ms:.1f} ms, "
                f"dead tuples {s.dead_tup} (max {s.dead_tup_max}), vacuums {s.vacuums},"
                f" autovacuums {s.autovacuums}"
            )
            next_sample += sample_every
            if next_sample > end + 1e-6:
                break
    finally:
        stop.set()
        feeder.join(timeout=30)
        worker.stop()
        runner.join(timeout=60)
        undo()
        worker_engine.dispose()
        producer_store.engine.dispose()
    elapsed = time.perf_counter() - t0
    second_half = samples[len(samples) // 2 :]
    extra = {
        "offered_rate": float(rate),
        "claim_p50_ms": statistics.median(s.claim_p50_ms for s in samples),
        "claim_p99_ms": statistics.median(s.claim_p99_ms for s in samples),
        "e2e_p50_ms": statistics.median(s.e2e_p50_ms for s in samples),
        "e2e_p99_ms": statistics.median(s.e2e_p99_ms for s in samples),
        "dead_tup_median": float(statistics.median(s.dead_tup for s in samples)),
        "dead_tup_max": float(max(s.dead_tup_max for s in samples)),
        "claim_p50_slope_ms_per_min": _slope([(s.t, s.claim_p50_ms) for s in second_half]) * 60,
        "e2e_p50_slope_ms_per_min": _slope([(s.t, s.e2e_p50_ms) for s in second_half]) * 60,
    }
    fig = Figure("L2", "alkstore", f"{rate}/s offered, {seconds:g}s", enqueued[0], elapsed, extra)
    if plot is not None:
        _plot(samples, plot, f"L2: {rate} jobs/s offered, Worker c={CONCURRENCY}")
    return fig, samples


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (units of y per second); 0 with fewer than two points."""
    if len(points) < 2:
        return 0.0
    xs, ys = zip(*points, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def table(samples: list[Sample]) -> str:
    head = (
        "  t (s)  jobs  claim p50  claim p99  e2e p50  e2e p99  dead tup (max)  live tup"
        "  vacuums  autovac"
    )
    rows = [head]
    for s in samples:
        rows.append(
            f"{s.t:7.0f} {s.jobs:5d} {s.claim_p50_ms:8.2f}ms {s.claim_p99_ms:8.2f}ms"
            f" {s.e2e_p50_ms:6.1f}ms {s.e2e_p99_ms:6.1f}ms {s.dead_tup:8d} ({s.dead_tup_max:6d})"
            f" {s.live_tup:9d} {s.vacuums:8d} {s.autovacuums:8d}"
        )
    return "\n".join(rows)


def _plot(samples: list[Sample], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("L2: matplotlib is not installed (the bench extra has it): no plot")
        return
    t = [s.t for s in samples]
    fig, (lat, dead) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    lat.plot(t, [s.claim_p50_ms for s in samples], label="claim p50")
    lat.plot(t, [s.claim_p99_ms for s in samples], label="claim p99")
    lat.plot(t, [s.e2e_p50_ms for s in samples], label="end-to-end p50")
    lat.plot(t, [s.e2e_p99_ms for s in samples], label="end-to-end p99")
    lat.set_ylabel("ms")
    lat.set_yscale("log")
    lat.legend(loc="upper left", fontsize=8)
    lat.set_title(title)
    dead.plot(t, [s.dead_tup for s in samples], label="n_dead_tup, median", color="tab:red")
    dead.plot(t, [s.dead_tup_max for s in samples], label="n_dead_tup, max", color="tab:orange")
    dead.set_ylabel("dead tuples")
    dead.set_xlabel("seconds")
    dead.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    say(f"L2: plot written to {path}")
