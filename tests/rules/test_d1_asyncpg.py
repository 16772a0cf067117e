"""D1: ``AsyncStore`` and ``AsyncWorker`` on ``postgresql+asyncpg`` engines.

The rule tests run on asyncpg as a parametrization of the async face
(``ALKSTORE_TEST_DRIVERS``, tests/_drivers.py; CI's asyncpg leg).  These
run on every run, whatever that variable says: what is asyncpg's own --
the engine checks, transactional enqueue in an asyncpg ``AsyncSession``,
the error mapping through SQLAlchemy's asyncpg adapter, the listener on
asyncpg's ``add_listener``, and the custom plans of the read operations.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Job, SchemaMissingError, Store
from alkstore_sa._db import engines as _engines

from .._workers import start_worker, wait_for

# The CI leg on the oldest SQLAlchemy allowed (2.0.30) checks the refusal
# instead: asyncpg needs 2.0.50 (alkstore_sa/_db/engines.py).
NEW_ENOUGH = _engines.sqlalchemy_version() >= _engines.ASYNCPG_MIN_SQLALCHEMY
pytestmark = pytest.mark.skipif(
    not NEW_ENOUGH, reason="asyncpg needs SQLAlchemy >= 2.0.50 (refusal pinned below)"
)

NO_POLL = 30.0  # far longer than any wait below: a job that arrives came by the wake


def _asyncpg(url: URL) -> URL:
    return url.set(drivername="postgresql+asyncpg")


@pytest.fixture
async def apg_engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(_asyncpg(database_url), pool_size=5, max_overflow=5)
    yield eng
    await eng.dispose()


def test_d1_async_store_takes_asyncpg_and_sync_store_refuses_it_clearly() -> None:
    engine = create_async_engine("postgresql+asyncpg://u@nowhere/db")
    assert AsyncStore(engine).engine is engine  # no connection made
    with pytest.raises(ValueError, match="cannot drive asyncpg, an asyncio-only driver"):
        Store(create_engine("postgresql+asyncpg://u@nowhere/db"))
    with pytest.raises(ValueError, match="cannot drive asyncpg"):
        Store.from_url("postgresql+asyncpg://u@nowhere/db")
    # from_url keeps the driver the URL names.
    assert AsyncStore.from_url("postgresql+asyncpg://u@nowhere/db").engine.dialect.driver == (
        "asyncpg"
    )


async def test_d1_transactional_enqueue_in_an_asyncpg_session(
    apg_engine: AsyncEngine, store: Store
) -> None:
    astore = AsyncStore(apg_engine)
    q = astore.queue("d1-tx")
    async with apg_engine.begin() as conn:
        await conn.execute(text("CREATE TABLE orders (id int PRIMARY KEY)"))

    async with AsyncSession(apg_engine) as session:
        await session.execute(text("INSERT INTO orders VALUES (1)"))
        kept = await q.enqueue(b"kept", session=session)
        many = await q.enqueue_many([b"a", b"b"], session=session)
        # Not visible outside the transaction before the commit.
        assert store.queue("d1-tx").get_job(kept) is None
        await session.commit()
    for job_id in (kept, *many):
        job = store.queue("d1-tx").get_job(job_id)
        assert job is not None and job.status == "pending"

    async with AsyncSession(apg_engine) as session:
        await session.execute(text("INSERT INTO orders VALUES (2)"))
        dropped = await q.enqueue(b"dropped", session=session)
        await session.rollback()
    assert store.queue("d1-tx").get_job(dropped) is None

    # The app's error rolls the enqueue back with it.
    with pytest.raises(IntegrityError):
        async with AsyncSession(apg_engine) as session, session.begin():
            lost = await q.enqueue(b"lost", session=session)
            await session.execute(text("INSERT INTO orders VALUES (1)"))
    assert store.queue("d1-tx").get_job(lost) is None
    async with AsyncSession(apg_engine) as session:
        assert (await session.execute(text("SELECT count(*) FROM orders"))).scalar() == 1
    await astore.close()


async def test_d1_missing_tables_map_to_schema_missing_error_on_asyncpg(
    blank_database: URL,
) -> None:
    """The SQLSTATE of an asyncpg error, read through SQLAlchemy's adapter."""
    engine = create_async_engine(_asyncpg(blank_database))
    try:
        astore = AsyncStore(engine)
        with pytest.raises(SchemaMissingError, match="no alkstore tables"):
            await astore.queue("q").enqueue(b"")
        with pytest.raises(SchemaMissingError):
            await astore.stats()
    finally:
        await engine.dispose()


async def test_d1_read_operations_get_custom_plans_on_asyncpg(database_url: URL) -> None:
    """A stats read is never served by a cached prepared statement (a generic plan
    could not use the partial indexes): each prepared copy runs once.  The
    control: the claim's statement is cached, one copy run many times."""
    engine = create_async_engine(_asyncpg(database_url), pool_size=1, max_overflow=0)
    sent: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    try:
        astore = AsyncStore(engine)
        q = astore.queue("d1-plans")
        await q.enqueue_many([b""] * 3)
        for _ in range(8):
            sent.clear()
            assert (await q.stats()).due == 3
            [stats_sql] = sent
        for _ in range(8):
            sent.clear()
            [handle] = await q.claim_batch("w", 1)
            claim_sql = sent[-1]
            await handle.retry(delay=0)
        async with engine.connect() as conn:  # the pool's one connection: the same backend
            rows = (
                await conn.execute(
                    text(
                        "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    runs: dict[str, list[int]] = {}
    for statement, count in rows:
        runs.setdefault(statement, []).append(count)
    assert max(runs[claim_sql]) >= 8, runs.get(claim_sql)
    assert all(count <= 1 for count in runs.get(stats_sql, [])), runs[stats_sql]


def test_d1_async_worker_on_asyncpg_wakes_by_listen_and_recovers(
    database_url: URL, store: Store
) -> None:
    """Q26 on asyncpg's listener: claim once LISTEN is up, wake on NOTIFY, and a
    LISTEN backend killed under it comes back (with the backoff) and wakes again."""
    done: set[int] = set()
    arrived = threading.Event()

    async def work(job: Job) -> None:
        done.add(job.id)
        arrived.set()

    first = store.queue("d1-wake").enqueue(b"before the worker")
    running = start_worker(
        "asyncpg",
        database_url,
        lambda s: AsyncWorker({s.queue("d1-wake"): work}, poll_interval=NO_POLL),
    )
    try:
        wait_for(lambda: first in done, timeout=10)  # the claim right after LISTEN
        job_id = store.queue("d1-wake").enqueue(b"woken")
        wait_for(lambda: job_id in done, timeout=5)
        (pid, app) = wait_for(lambda: _listener(store), timeout=5)[0]
        assert app.startswith("alkstore "), app  # the worker's name, as on psycopg
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        wait_for(lambda: [p for p, _ in _listener(store) if p != pid], timeout=10)
        again = store.queue("d1-wake").enqueue(b"after the reconnect")
        wait_for(lambda: again in done, timeout=5)
    finally:
        running.stop()


def _listener(store: Store) -> list[tuple[int, str]]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT pid, application_name FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %' "
                "AND pid <> pg_backend_pid()"
            )
        )
        return [(r[0], r[1]) for r in rows]


def test_d1_session_handler_commits_with_the_ack_on_asyncpg(
    database_url: URL, store: Store
) -> None:
    """Q28 on asyncpg: a ``(job, AsyncSession)`` handler's write and the ack commit together."""
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE receipts (job_id bigint PRIMARY KEY)"))
    ids = store.queue("d1-q28").enqueue_many([b"", b""])

    async def charge(job: Job, session: Any) -> None:
        await session.execute(text("INSERT INTO receipts VALUES (:id)"), {"id": job.id})

    running = start_worker(
        "asyncpg",
        database_url,
        lambda s: AsyncWorker({s.queue("d1-q28"): charge}, poll_interval=0.1),
    )
    try:
        wait_for(lambda: all(store.queue("d1-q28").get_job(i) is None for i in ids))
    finally:
        running.stop()
    with store.engine.connect() as conn:
        assert sorted(r[0] for r in conn.execute(text("SELECT job_id FROM receipts"))) == ids


_ASYNCPG_TASKS = """
import os
from sqlalchemy.ext.asyncio import create_async_engine
from alkstore_sa import AsyncStore, AsyncWorker

url = os.environ["ALKSTORE_DATABASE_URL"]
engine = create_async_engine(url)
assert engine.dialect.driver == "asyncpg", url  # the URL reaches the module as given
pings = AsyncStore(engine).queue("pings")

async def handler(job):
    pass

worker = AsyncWorker({pings: handler}, poll_interval=0.2)
"""


def test_d1_v3_cli_worker_and_other_commands_take_an_asyncpg_url(
    database_url: URL, store: Store, tmp_path: Path
) -> None:
    """`alkstore worker` hands an asyncpg URL to the user's module as given (its own
    preflight goes through psycopg); the CLI's own commands reach that database
    through psycopg too (V3, which replaced the refusal this test pinned before)."""
    url = _asyncpg(database_url).render_as_string(hide_password=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
    env["ALKSTORE_DATABASE_URL"] = url
    (tmp_path / "apgtasks.py").write_text(_ASYNCPG_TASKS)
    ids = store.queue("pings").enqueue_many([b"a", b"b"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", "worker", "apgtasks:worker"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: all(store.queue("pings").get_job(i) is None for i in ids), timeout=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err

    stats = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "stats"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stats.returncode == 0, stats.stderr
    assert not stats.stderr
