"""Q6: a store's own commit leaves the pooled connection as it found it.

Without ``session=`` an operation runs in driver autocommit on a connection of
the caller's engine; the connection must go back to the pool in the engine's
own mode, so the application's next transaction on it is a transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import URL, Engine, create_engine, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from alkstore_sa import AsyncStore, Store
from alkstore_sa.schema import jobs


@pytest.fixture
def one_conn_engine(database_url: URL) -> Iterator[Engine]:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


@pytest.fixture
async def one_conn_async_engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database_url, pool_size=1, max_overflow=0)
    yield engine
    await engine.dispose()


def _live_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def test_q6_own_commit_hands_the_connection_back_transactional(one_conn_engine: Engine) -> None:
    store = Store(one_conn_engine)
    q = store.queue("q6pool")
    q.enqueue(b"a")
    assert q.claim_batch("w", 1)
    before = _live_count(one_conn_engine)
    # The same (only) pooled connection: the app's writes must roll back.
    with one_conn_engine.connect() as conn:
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout) VALUES ('q6pool', 'x', now(), 1, interval '1 s')"
            )
        )
        conn.rollback()
    assert _live_count(one_conn_engine) == before


def test_q6_own_commit_keeps_an_autocommit_engine_autocommit(database_url: URL) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0, isolation_level="AUTOCOMMIT")
    try:
        Store(engine).queue("q6auto").enqueue(b"a")
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection.autocommit is True  # type: ignore[union-attr]
    finally:
        engine.dispose()


def test_q6_own_commit_after_a_failed_statement_hands_the_connection_back(
    one_conn_engine: Engine,
) -> None:
    store = Store(one_conn_engine, schema="no_such_schema")
    with pytest.raises(Exception, match="no alkstore tables"):
        store.queue("q6err").enqueue(b"a")
    with one_conn_engine.connect() as conn:
        assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]


async def test_q6_async_own_commit_hands_the_connection_back_transactional(
    one_conn_async_engine: AsyncEngine,
) -> None:
    store = AsyncStore(one_conn_async_engine)
    await store.queue("q6apool").enqueue(b"a")
    async with one_conn_async_engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert raw.driver_connection.autocommit is False  # type: ignore[union-attr]
