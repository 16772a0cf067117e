"""pgqueuer baselines through its public API, in the same database.

pgqueuer's schema is installed by its own ``Queries.install()`` (what
``pgq install`` runs).  Drain: 5 consumers, each a ``PgQueuer`` over its own
connection, ``run(batch_size=10, mode=drain)``, an async no-op entrypoint --
the shape of pgqueuer's own drain benchmark.  Batch enqueue:
``Queries.enqueue`` with lists of 1,000.  Run under uvloop when it is
installed (pgqueuer depends on it and its own benchmark uses it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._cases import PAYLOAD
from ._db import Database
from ._progress import Bar
from ._report import Figure

DRIVERS = ("asyncpg", "psycopg")


def available() -> str | None:
    """pgqueuer's version, or None when the ``bench`` extra is not installed."""
    try:
        import pgqueuer
    except ImportError:
        return None
    return str(getattr(pgqueuer, "__version__", "?"))


def _run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro_fn())
    return uvloop.run(coro_fn())


async def _driver(db: Database, kind: str) -> Any:
    from pgqueuer.db import AsyncpgDriver, PsycopgDriver

    if kind == "asyncpg":
        import asyncpg

        return AsyncpgDriver(await asyncpg.connect(dsn=db.dsn()))
    import psycopg

    return PsycopgDriver(await psycopg.AsyncConnection.connect(db.dsn(), autocommit=True))


async def _close(driver: Any) -> None:
    conn = driver._connection  # the connection we gave it; pgqueuer does not own it
    await conn.close()


def install(db: Database) -> None:
    async def go() -> None:
        from pgqueuer.queries import Queries

        driver = await _driver(db, "asyncpg")
        await Queries(driver).install()
        await _close(driver)

    _run(go)


def _enqueue_lists(k: int) -> tuple[list[str], list[bytes | None], list[int]]:
    return ["noop"] * k, [PAYLOAD] * k, [0] * k


def enqueue_batches(db: Database, kind: str, batches: int, size: int, label: str) -> Figure:
    async def go() -> float:
        from pgqueuer.queries import Queries

        driver = await _driver(db, kind)
        queries = Queries(driver)
        await queries.clear_queue()
        ep, pl, pr = _enqueue_lists(size)
        for _ in range(3):
            await queries.enqueue(ep, pl, pr)
        await queries.clear_queue()
        bar = Bar(label, batches * size)
        t0 = time.perf_counter()
        for _ in range(batches):
            await queries.enqueue(ep, pl, pr)
            bar.advance(size)
        seconds = time.perf_counter() - t0
        bar.close(rate=bar.done / seconds)
        await queries.clear_queue()
        await _close(driver)
        return seconds

    seconds = _run(go)
    shape = f"Queries.enqueue x {size:,}"
    return Figure("E2", f"pgqueuer-{kind}", shape, batches * size, seconds)


def drain(db: Database, kind: str, jobs: int, consumers: int, batch: int, label: str) -> Figure:
    async def go() -> float:
        from pgqueuer import PgQueuer
        from pgqueuer.queries import Queries

        setup = await _driver(db, kind)
        queries = Queries(setup)
        await queries.clear_queue()
        for start in range(0, jobs, 5_000):
            await queries.enqueue(*_enqueue_lists(min(5_000, jobs - start)))
        drivers = [await _driver(db, kind) for _ in range(consumers)]
        bar = Bar(label, jobs)
        done = 0

        def make(pgq: PgQueuer) -> PgQueuer:
            @pgq.entrypoint("noop")
            async def noop(job: Any) -> None:
                nonlocal done
                done += 1
                bar.set(done)

            return pgq

        async def emptied() -> float:
            # As for alkstore's D2: the drain ends when every job ran and its
            # row left the queue table -- not when run() has shut down (the
            # psycopg driver's listener takes up to a second per consumer).
            while done < jobs:
                await asyncio.sleep(0.002)
            while sum(x.count for x in await queries.queue_size()):
                await asyncio.sleep(0.002)
            return time.perf_counter()

        pgqs = [make(PgQueuer(d)) for d in drivers]
        t0 = time.perf_counter()
        runs = asyncio.gather(*(p.run(batch_size=batch, mode=_drain_mode()) for p in pgqs))
        t1 = await emptied()
        await asyncio.wait_for(runs, 120)
        seconds = t1 - t0
        bar.close(rate=bar.done / seconds)
        left = sum(x.count for x in await queries.queue_size())
        if done != jobs or left:
            raise RuntimeError(f"{label}: ran {done} of {jobs} jobs, {left} left queued")
        for d in [*drivers, setup]:
            await _close(d)
        return seconds

    seconds = _run(go)
    shape = f"{consumers} consumers x batch {batch}"
    return Figure("D2", f"pgqueuer-{kind}", shape, jobs, seconds)


def _drain_mode() -> Any:
    from pgqueuer.types import QueueExecutionMode

    return QueueExecutionMode.drain
