"""E1/E2 (and E1U/E2U, with unique keys) and the S1-S4 backlogs, for alkstore_sa and raw psycopg.

Every case starts on empty tables (``reset``) and warms its statements
before the clock starts, so each side is timed at its steady state.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from sqlalchemy import create_engine

from alkstore_sa import EnqueueOpts, Store

from ._db import Database
from ._progress import Bar
from ._report import Figure

PAYLOAD = b'{"task": "noop"}'
CHANNEL = "alkstore.bench"

# Raw E1: the least one enqueue can be -- one autocommit statement that
# inserts the row and notifies the channel (the notify in the same statement,
# so it is sent at commit, as alkstore's is).
RAW_INSERT_NOTIFY = """
WITH ins AS (
  INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout)
  VALUES (%(q)s, %(p)s, statement_timestamp(), 5, interval '30 seconds')
  RETURNING id),
wake AS (SELECT pg_notify(%(c)s, ''))
SELECT ins.id FROM ins, wake
"""
# Raw E2: one multi-row insert of a whole batch (bytea[] unnested) + one notify.
RAW_INSERT_MANY = """
WITH ins AS (
  INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout)
  SELECT %(q)s, p, statement_timestamp(), 5, interval '30 seconds'
    FROM unnest(%(ps)s::bytea[]) WITH ORDINALITY AS u(p, o) ORDER BY o
  RETURNING id),
wake AS (SELECT pg_notify(%(c)s, ''))
SELECT ins.id FROM ins, wake
"""


def reset(db: Database) -> None:
    """Empty the live and dead tables (the next case starts from nothing)."""
    with db.connect() as conn:
        conn.execute("TRUNCATE alkstore.jobs, alkstore.dead_jobs, alkstore.completed_jobs")


def _store(db: Database) -> Store:
    return Store(create_engine(db.sa_url(), pool_size=2, max_overflow=0))


def e1_alkstore(db: Database, jobs: int, label: str) -> Figure:
    store = _store(db)
    q = store.queue("e1")
    for _ in range(20):
        store.queue("bench-warmup").enqueue(PAYLOAD)
    bar = Bar(label, jobs)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(jobs):
        q.enqueue(PAYLOAD)
        bar.advance()
    seconds = time.perf_counter() - t0
    cpu = _cpu_us_per_job(c0, jobs)
    bar.close(rate=bar.done / seconds)
    store.engine.dispose()
    return Figure("E1", "alkstore", "1 job per transaction", jobs, seconds, cpu)


def e1_async(db: Database, jobs: int, label: str, driver: str) -> Figure:
    """E1 through ``AsyncStore`` on ``driver`` (D1: psycopg beside asyncpg, one run)."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from alkstore_sa import AsyncStore

    async def go() -> tuple[float, dict[str, float]]:
        engine = create_async_engine(db.async_url(driver), pool_size=2, max_overflow=0)
        store = AsyncStore(engine)
        q = store.queue("e1")
        for _ in range(20):
            await store.queue("bench-warmup").enqueue(PAYLOAD)
        bar = Bar(label, jobs)
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(jobs):
            await q.enqueue(PAYLOAD)
            bar.advance()
        seconds = time.perf_counter() - t0
        cpu = _cpu_us_per_job(c0, jobs)
        bar.close(rate=bar.done / seconds)
        await engine.dispose()
        return seconds, cpu

    seconds, cpu = asyncio.run(go())
    return Figure(
        "E1", async_system(driver), "1 job per transaction, AsyncStore", jobs, seconds, cpu
    )


def async_system(driver: str) -> str:
    """The figure's system for the async face on ``driver``."""
    return "alkstore-async" if driver == "psycopg" else f"alkstore-{driver}"


def _cpu_us_per_job(since: float, jobs: int) -> dict[str, float]:
    """This process's CPU time (every thread) per job since ``since`` (``process_time()``).

    Less at the mercy of a busy machine than the wall clock: what our side
    spends, not how long it waited for a core or the server.
    """
    return {"cpu_us_per_job": (time.process_time() - since) / max(jobs, 1) * 1e6}


def e1_raw(db: Database, jobs: int, label: str) -> Figure:
    with db.connect() as conn:
        for _ in range(20):
            conn.execute(RAW_INSERT_NOTIFY, {"q": "bench-warmup", "p": PAYLOAD, "c": CHANNEL})
        bar = Bar(label, jobs)
        t0 = time.perf_counter()
        for _ in range(jobs):
            conn.execute(RAW_INSERT_NOTIFY, {"q": "e1", "p": PAYLOAD, "c": CHANNEL}).fetchone()
            bar.advance()
        seconds = time.perf_counter() - t0
        bar.close(rate=bar.done / seconds)
    return Figure("E1", "raw-psycopg", "insert+notify, 1 round trip", jobs, seconds)


def e2_alkstore(db: Database, batches: int, size: int, label: str) -> Figure:
    store = _store(db)
    q = store.queue("e2")
    batch = [PAYLOAD] * size
    for _ in range(3):
        store.queue("bench-warmup").enqueue_many(batch)
    bar = Bar(label, batches * size)
    t0 = time.perf_counter()
    for _ in range(batches):
        q.enqueue_many(batch)
        bar.advance(size)
    seconds = time.perf_counter() - t0
    bar.close(rate=bar.done / seconds)
    store.engine.dispose()
    return Figure("E2", "alkstore", f"enqueue_many x {size:,}", batches * size, seconds)


def e2_raw(db: Database, batches: int, size: int, label: str) -> Figure:
    batch = [PAYLOAD] * size
    with db.connect() as conn:
        for _ in range(6):
            conn.execute(RAW_INSERT_MANY, {"q": "bench-warmup", "ps": batch, "c": CHANNEL})
        bar = Bar(label, batches * size)
        t0 = time.perf_counter()
        for _ in range(batches):
            conn.execute(RAW_INSERT_MANY, {"q": "e2", "ps": batch, "c": CHANNEL}).fetchall()
            bar.advance(size)
        seconds = time.perf_counter() - t0
        bar.close(rate=bar.done / seconds)
    return Figure("E2", "raw-psycopg", f"multi-row insert x {size:,}", batches * size, seconds)


def e1u_alkstore(db: Database, jobs: int, label: str) -> list[Figure]:
    """E1 with a unique key per job (U1): every key new, then every key live again.

    The first loop is the keyed insert (one statement, as E1's); the second
    enqueues the same keys while their jobs are still live, so each call
    writes nothing and gets the live job's id (the insert, then a look-up).
    """
    store = _store(db)
    q = store.queue("e1u")
    warm = store.queue("bench-warmup")
    for i in range(20):
        warm.enqueue(PAYLOAD, EnqueueOpts(unique_key=f"w{i}"))
        warm.enqueue(PAYLOAD, EnqueueOpts(unique_key=f"w{i}"))
    opts = [EnqueueOpts(unique_key=f"e1u-{i}") for i in range(jobs)]  # built off the clock
    figs = []
    for shape in ("1 job per transaction, new key", "key live: its id back, 0 rows"):
        bar = Bar(f"{label} ({shape.split(',')[0]})", jobs)
        c0 = time.process_time()
        t0 = time.perf_counter()
        for o in opts:
            q.enqueue(PAYLOAD, o)
            bar.advance()
        seconds = time.perf_counter() - t0
        cpu = _cpu_us_per_job(c0, jobs)
        bar.close(rate=bar.done / seconds)
        figs.append(Figure("E1U", "alkstore", shape, jobs, seconds, cpu))
    store.engine.dispose()
    return figs


def e2u_alkstore(db: Database, batches: int, size: int, label: str) -> Figure:
    """E2 with a unique key per payload (``enqueue_many(..., unique_keys=...)``), all new."""
    store = _store(db)
    q = store.queue("e2u")
    batch = [PAYLOAD] * size
    for r in range(3):
        store.queue("bench-warmup").enqueue_many(
            batch, unique_keys=[f"w{r}-{i}" for i in range(size)]
        )
    keys = [[f"e2u-{b}-{i}" for i in range(size)] for b in range(batches)]
    bar = Bar(label, batches * size)
    t0 = time.perf_counter()
    for ks in keys:
        q.enqueue_many(batch, unique_keys=ks)
        bar.advance(size)
    seconds = time.perf_counter() - t0
    bar.close(rate=bar.done / seconds)
    store.engine.dispose()
    return Figure("E2U", "alkstore", f"enqueue_many x {size:,}, new keys", batches * size, seconds)


def fill(db: Database, queue: str, jobs: int) -> None:
    """Pre-enqueue ``jobs`` due jobs through the public API (not timed)."""
    store = _store(db)
    q = store.queue(queue)
    for start in range(0, jobs, 5_000):
        q.enqueue_many([PAYLOAD] * min(5_000, jobs - start))
    store.engine.dispose()


def fill_dead(conn: psycopg.Connection[Any], queue: str, dead: int, *, first_id: int) -> None:
    """``dead`` dead rows of ``queue`` with ids from ``first_id``, bulk-made in SQL.

    What a dead-letter move leaves (attempts used up, 'max attempts
    exceeded'); ids far above any live job's, so they never collide.
    """
    conn.execute(
        """
        INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,
               max_attempts, visibility_timeout, created_at, last_error, died_at)
        SELECT %(first)s - 1 + g, %(q)s, %(p)s, 0, statement_timestamp(), 5, 5,
               interval '30 seconds', statement_timestamp(), 'max attempts exceeded',
               statement_timestamp()
          FROM generate_series(1, %(k)s) AS g
        """,
        {"first": first_id, "q": queue, "p": PAYLOAD, "k": dead},
    )


def grow(db: Database, queue: str, future: int, dead: int) -> None:
    """S1's weight: ``future`` not-yet-due live rows and ``dead`` dead rows in ``queue``.

    Bulk-made in SQL (generate_series): far faster than enqueueing them, and
    the rows are what enqueue_many and a dead-letter move would have left.
    """
    with db.connect() as conn:
        conn.execute(
            """
            INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout)
            SELECT %(q)s, %(p)s, statement_timestamp() + interval '1 day', 5,
                   interval '30 seconds'
              FROM generate_series(1, %(k)s)
            """,
            {"q": queue, "p": PAYLOAD, "k": future},
        )
        fill_dead(conn, queue, dead, first_id=1_000_000_000_001)
        conn.execute("VACUUM (ANALYZE) alkstore.jobs")
        conn.execute("VACUUM (ANALYZE) alkstore.dead_jobs")


def fill_due(db: Database, queue: str, jobs: int) -> None:
    """``jobs`` due jobs at priority 0, bulk-made in SQL (as enqueue_many leaves them)."""
    with db.connect() as conn:
        conn.execute(
            """
            INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout)
            SELECT %(q)s, %(p)s, statement_timestamp(), 5, interval '30 seconds'
              FROM generate_series(1, %(k)s)
            """,
            {"q": queue, "p": PAYLOAD, "k": jobs},
        )


def grow_outranking(db: Database, queue: str, rows: int, *, expired: bool) -> None:
    """S2/S3's weight: ``rows`` unclaimable pending rows at priority 10 in ``queue``.

    The drain's jobs are at priority 0, so every one of these outranks them
    in the claim order: not yet due (S2: run_at a day ahead), or due but
    expired and not yet swept (S3: run_at an hour ago, expires_at a minute
    ago).  Bulk-made in SQL, then vacuumed and analysed.
    """
    when = (
        "statement_timestamp() - interval '1 hour', statement_timestamp() - interval '1 minute'"
        if expired
        else "statement_timestamp() + interval '1 day', NULL"
    )
    with db.connect() as conn:
        conn.execute(
            f"""
            INSERT INTO alkstore.jobs (queue, payload, priority, run_at, expires_at,
                                       max_attempts, visibility_timeout)
            SELECT %(q)s, %(p)s, 10, {when}, 5, interval '30 seconds'
              FROM generate_series(1, %(k)s)
            """,
            {"q": queue, "p": PAYLOAD, "k": rows},
        )
        conn.execute("VACUUM (ANALYZE) alkstore.jobs")
