"""D1/S1-S4: several processes drain one queue with claim + ack, batch ``n``.

Each process (``spawn``, so nothing is inherited) opens its connection,
warms its statements on an empty queue, reports ready and waits for the
start signal; then it claims ``n`` and acks them until a claim comes back
empty.  With ``timings`` each process also records every claim's start and
duration (S4 compares the claims at the start of a drain with those at its
end).  The time is from the first process's start to the last one's end
(``perf_counter`` is the system-wide monotonic clock on Linux, so the
processes' readings compare).  Setup and process start are not timed.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._progress import Bar

# Raw psycopg: the same design written by hand, the least any client of this
# table layout can do per batch: one SKIP LOCKED claim (UPDATE ... RETURNING
# the rows, as a worker needs them) and one DELETE of the batch by id.  It
# takes unparked rows in ``jobs_claim_ix``'s order (queue, priority DESC,
# parked, run_at, id; revision 0016), as the library's claim does.
RAW_CLAIM = """
UPDATE alkstore.jobs AS j
   SET status = 'processing', attempts = j.attempts + 1, worker_id = %(w)s,
       claim_deadline = statement_timestamp() + j.visibility_timeout,
       deadline_floor = statement_timestamp() + j.visibility_timeout
  FROM (SELECT id FROM alkstore.jobs
         WHERE queue = %(q)s AND status = 'pending' AND NOT parked
           AND run_at <= statement_timestamp()
         ORDER BY priority DESC, run_at, id
         LIMIT %(n)s
           FOR UPDATE SKIP LOCKED) AS c
 WHERE j.id = c.id
RETURNING j.*
"""
RAW_ACK = "DELETE FROM alkstore.jobs WHERE id = ANY(%(ids)s) AND status = 'processing'"


# (start, seconds, rows) of each claim that returned rows (perf_counter readings).
Timed = list[tuple[float, float, int]]


@dataclass
class DrainResult:
    jobs: int
    seconds: float
    # With ``timings``: (start, seconds, rows) of every claim that returned rows.
    claims: Timed = field(default_factory=list)


def _alk_loop(
    dsn_sa: str, queue: str, n: int, wid: str, timed: Timed | None = None
) -> tuple[Callable[[], int], Any]:
    from sqlalchemy import create_engine

    from alkstore_sa import Store

    from . import _otel

    _otel.enable_from_env()  # the parent's --otel mode (B3 cost), in this process too
    engine = create_engine(dsn_sa, pool_size=1, max_overflow=0)
    store = Store(engine)
    warm = store.queue("bench-warmup")
    for h in warm.claim_batch(wid, n):  # pragma: no cover - the warmup queue is empty
        h.ack()
    warm.ack_batch([1])
    q = store.queue(queue)

    def step() -> int:
        handles = q.claim_batch(wid, n)
        if handles:
            q.ack_batch([h.id for h in handles])
        return len(handles)

    def timed_step() -> int:
        assert timed is not None
        start = time.perf_counter()
        handles = q.claim_batch(wid, n)
        if handles:
            timed.append((start, time.perf_counter() - start, len(handles)))
            q.ack_batch([h.id for h in handles])
        return len(handles)

    return (step if timed is None else timed_step), engine


def _async_loop(
    dsn_sa: str, queue: str, n: int, wid: str, timed: Timed | None = None
) -> tuple[Callable[[], int], Any]:
    """The same loop through ``AsyncStore`` (D1: its driver is ``dsn_sa``'s), each
    step one ``run_until_complete`` on this process's own event loop."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from alkstore_sa import AsyncStore

    loop = asyncio.new_event_loop()
    engine = create_async_engine(dsn_sa, pool_size=1, max_overflow=0)
    store = AsyncStore(engine)
    q = store.queue(queue)

    async def warm() -> None:
        w = store.queue("bench-warmup")
        await w.claim_batch(wid, n)
        await w.ack_batch([1])

    async def astep() -> int:
        handles = await q.claim_batch(wid, n)
        if handles:
            await q.ack_batch([h.id for h in handles])
        return len(handles)

    loop.run_until_complete(warm())

    class Resource:
        def dispose(self) -> None:
            loop.run_until_complete(engine.dispose())
            loop.close()

    return (lambda: loop.run_until_complete(astep())), Resource()


def _raw_loop(
    dsn: str, queue: str, n: int, wid: str, timed: Timed | None = None
) -> tuple[Callable[[], int], Any]:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    warm = {"w": wid, "q": "bench-warmup", "n": n}
    for _ in range(6):  # past psycopg's prepare_threshold (5): both statements prepared
        conn.execute(RAW_CLAIM, warm).fetchall()
        conn.execute(RAW_ACK, {"ids": [1]})

    def step() -> int:
        rows = conn.execute(RAW_CLAIM, {"w": wid, "q": queue, "n": n}).fetchall()
        if rows:
            conn.execute(RAW_ACK, {"ids": [r[0] for r in rows]})
        return len(rows)

    return step, conn


def _child(
    kind: str,
    dsn: str,
    queue: str,
    n: int,
    idx: int,
    ready: Any,
    go: Any,
    counts: Any,
    out: Any,
    timings: bool = False,
) -> None:
    wid = f"bench-{kind}-{idx}"
    claims: Timed | None = [] if timings else None
    make = {"alkstore": _alk_loop, "alkstore-async": _async_loop}.get(kind, _raw_loop)
    step, resource = make(dsn, queue, n, wid, claims)
    ready.put(idx)
    go.wait()
    done = 0
    t0 = time.perf_counter()
    while True:
        got = step()
        if not got:
            break
        done += got
        counts[idx] = done
    t1 = time.perf_counter()
    out.put((idx, t0, t1, done, claims or []))
    if kind.startswith("alkstore"):
        resource.dispose()
    else:
        resource.close()


def drain(
    kind: str,
    dsn: str,
    queue: str,
    n: int,
    procs: int,
    total: int,
    label: str,
    *,
    timings: bool = False,
) -> DrainResult:
    """Run one drain; ``dsn`` is a SQLAlchemy URL for alkstore (``alkstore-async``:
    an async one, of either driver), a libpq URI for raw."""
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    counts = ctx.Array("q", procs, lock=False)
    children = [
        # daemon: an interrupted run must not wait on (or leave) its drainers
        ctx.Process(
            target=_child,
            args=(kind, dsn, queue, n, i, ready, go, counts, out, timings),
            daemon=True,
        )
        for i in range(procs)
    ]
    for c in children:
        c.start()
    for _ in children:
        ready.get(timeout=120)
    bar = Bar(label, total)
    go.set()
    results = []
    while len(results) < procs:
        try:
            results.append(out.get(timeout=0.1))
        except Exception:  # queue.Empty: not finished yet, redraw
            if not any(c.is_alive() for c in children) and out.empty():
                raise RuntimeError(f"{label}: a drain process died") from None
        bar.set(sum(counts[:]))
    for c in children:
        c.join(timeout=60)
    jobs = sum(r[3] for r in results)
    seconds = max(r[2] for r in results) - min(r[1] for r in results)
    bar.set(jobs)
    bar.close(rate=jobs / seconds)
    claims = sorted(c for r in results for c in r[4])
    return DrainResult(jobs=jobs, seconds=seconds, claims=claims)
