"""ST: ``stats()`` on a big queue, and on a small queue beside it (O5, O6).

The big queue holds ``live`` live rows (70% pending and due, 20% pending
and not yet due, 10% processing, a tenth of those lapsed) and ``dead`` dead
rows, made in SQL (``generate_series``) as S1's backlog is; the small one
holds 100 live rows and 10 dead ones, made through the public API.  Both
tables are vacuumed and analysed, then each call is timed alone (warmed
first): ``Queue.stats()`` of each queue, ``Store.queue_names()`` and
``Store.stats()`` (both queues in one statement).  The small queue's
figure is the point: its cost must not grow with its neighbour's rows.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from sqlalchemy import create_engine

from alkstore_sa import Store
from alkstore_sa._db import ops as _ops

from ._cases import PAYLOAD, fill_dead
from ._db import Database
from ._progress import Bar, say
from ._report import Figure

BIG = "st-big"
SMALL = "st-small"


def grow(db: Database, live: int, dead: int) -> None:
    """The big queue's rows (SQL), then the small queue's (the public API)."""
    with db.connect() as conn:
        conn.execute(
            """
            INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout,
                                       status, attempts, worker_id, claim_deadline)
            SELECT %(q)s, %(p)s,
                   statement_timestamp() + CASE WHEN g %% 10 IN (7, 8) THEN interval '1 day'
                                                ELSE -interval '1 minute' END,
                   5, interval '30 seconds',
                   CASE WHEN g %% 10 = 9 THEN 'processing' ELSE 'pending' END,
                   CASE WHEN g %% 10 = 9 THEN 1 ELSE 0 END,
                   CASE WHEN g %% 10 = 9 THEN 'bench' END,
                   CASE WHEN g %% 10 = 9 THEN statement_timestamp()
                        + CASE WHEN g %% 100 = 99 THEN -interval '1 minute'
                               ELSE interval '1 hour' END
                   END
              FROM generate_series(1, %(k)s) AS g
            """,
            {"q": BIG, "p": PAYLOAD, "k": live},
        )
        # A claim sets its lapse index key with its deadline (H1).
        conn.execute(
            "UPDATE alkstore.jobs SET deadline_floor = claim_deadline"
            " WHERE queue = %(q)s AND status = 'processing'",
            {"q": BIG},
        )
        fill_dead(conn, BIG, dead, first_id=2_000_000_000_001)
    store = Store(create_engine(db.sa_url(), pool_size=1, max_overflow=0))
    small = store.queue(SMALL)
    small.enqueue_many([PAYLOAD] * 110)
    for handle in small.claim_batch("bench", 15):
        if handle.id % 3 == 0:
            handle.fail("bench")
    store.engine.dispose()
    with db.connect() as conn:
        conn.execute("VACUUM (ANALYZE) alkstore.jobs")
        conn.execute("VACUUM (ANALYZE) alkstore.dead_jobs")


def _timed(label: str, calls: int, call: Callable[[], object]) -> tuple[float, list[float]]:
    for _ in range(3):  # statement caches, plans, buffers
        call()
    bar = Bar(label, calls)
    took = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        took.append(time.perf_counter() - t0)
        bar.advance()
    total = sum(took)
    bar.close(rate=calls / total)
    return total, took


def _figure(shape: str, total: float, took: list[float]) -> Figure:
    ms = sorted(t * 1000 for t in took)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    extra = {"p50_ms": statistics.median(ms), "p95_ms": p95, "max_ms": ms[-1]}
    # "jobs" is the number of calls here: jobs/s reads as calls per second.
    return Figure("ST", "alkstore", shape, len(ms), total, extra)


def measure(db: Database, live: int, dead: int, label: str) -> list[Figure]:
    say(f"ST: adding {live:,} live and {dead:,} dead rows to one queue ...")
    grow(db, live, dead)
    store = Store(create_engine(db.sa_url(), pool_size=1, max_overflow=0))
    try:
        big, small = store.queue(BIG), store.queue(SMALL)
        checked = big.stats()
        if checked.due + checked.scheduled + checked.processing != live or checked.dead != dead:
            raise RuntimeError(f"{label}: the big queue's stats do not add up: {checked}")
        size = f"{live // 1000:,}k live + {dead // 1000:,}k dead"
        runs = [
            (f"q.stats(), {size}", "big", 15, big.stats),
            ("q.stats(), small queue beside it", "small", 300, small.stats),
            ("store.queue_names()", "names", 300, store.queue_names),
            ("store.stats(), both queues", "store", 15, store.stats),
        ]
        figures = [
            _figure(shape, *_timed(f"{label} {what}", n, call)) for shape, what, n, call in runs
        ]
    finally:
        store.engine.dispose()
    return figures


def claim_reads(db: Database, queue: str, n: int = 10) -> dict[str, float]:
    """What one claim of ``queue`` reads, from its ``EXPLAIN (ANALYZE, BUFFERS)``.

    The claim this server gets (run in a transaction rolled back after):
    shared buffers read through each claim-path index, summed over every
    scan of it in the plan, and the execution time in ms.  S4 takes it
    before and after its drain.
    """
    from alkstore_sa._db.sql import claim as claim_sql
    from alkstore_sa._db.sql._render import rendered

    engine = create_engine(db.sa_url(), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            pick = getattr(_ops, "_claim_statement", None)
            stmt = pick(conn) if pick is not None else claim_sql.claim()
            text = rendered(stmt, conn.dialect, "alkstore")
            assert text is not None
            params = text.params({"p_queue": queue, "p_worker_id": "explain", "p_n": n})
            # The batch size is in the claim's text (literal_execute), not a parameter.
            sql = text.texts(params)[0]
            params = {k: v for k, v in params.items() if k not in text.inlined}
            tx = conn.begin()
            try:
                explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql
                plan = conn.exec_driver_sql(explain, params).scalar_one()[0]
            finally:
                tx.rollback()
    finally:
        engine.dispose()
    reads = {"claim_ix_buffers": 0.0, "lapse_ix_buffers": 0.0}
    stack = [plan["Plan"]]
    while stack:
        node = stack.pop()
        stack.extend(node.get("Plans", []))
        key = {"jobs_claim_ix": "claim_ix_buffers", "jobs_lapse_ix": "lapse_ix_buffers"}.get(
            node.get("Index Name", "")
        )
        if key is not None:
            reads[key] += node["Shared Hit Blocks"] + node["Shared Read Blocks"]
    reads["claim_exec_ms"] = float(plan["Execution Time"])
    return reads
