"""How operations reach the driver (``alkstore_sa/_execute.py``).

A store-owned (autocommit) statement runs straight on the DBAPI cursor only
when nothing could tell the difference from ``Connection.exec_driver_sql``:
no event listener and no statement log.  Otherwise SQLAlchemy's execution
path runs it, so listeners and ``echo`` see every statement; errors come out
wrapped the same way on both paths.  (Q30's tests run the cursor path
against killed connections.)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Connection, Engine, create_engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from alkstore_sa import AsyncStore, Store

from .._locks import row_locked


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("went through Connection.exec_driver_sql")


def _round_trip(store: Store) -> None:
    q = store.queue("paths")
    job_id = q.enqueue(b"a")
    assert q.enqueue_many([b"b", b"c"]) == [job_id + 1, job_id + 2]
    handles = q.claim_batch("w", 5)
    assert [h.payload for h in handles] == [b"a", b"b", b"c"]
    assert handles[0].heartbeat(5) and handles[0].ack()
    assert q.ack_batch([h.id for h in handles[1:]]) == 2
    assert q.get_job(job_id) is None


def test_an_unobserved_store_runs_statements_on_the_cursor(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.engine.connect():  # the dialect's first-connect queries use it
        pass
    monkeypatch.setattr(Connection, "exec_driver_sql", _refuse)
    _round_trip(store)


async def test_an_unobserved_async_store_runs_statements_on_the_cursor(
    async_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with async_engine.connect():  # the dialect's first-connect queries use it
        pass
    monkeypatch.setattr(Connection, "exec_driver_sql", _refuse)
    q = AsyncStore(async_engine).queue("paths")
    job_id = await q.enqueue(b"a")
    (handle,) = await q.claim_batch("w", 5)
    assert handle.id == job_id and await handle.ack()
    assert await q.get_job(job_id) is None


def test_a_cursor_listener_sees_every_statement(engine: Engine) -> None:
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(statement)

    _round_trip(Store(engine))
    # enqueue, enqueue_many, the first claim's park (S3), claim, heartbeat, ack,
    # ack_batch, get_job
    assert len(seen) == 8
    assert seen[0].startswith("WITH inserted AS") and "pg_notify" in seen[0]


def test_echo_logs_every_statement(database_url: URL, caplog: pytest.LogCaptureFixture) -> None:
    eng = create_engine(database_url, echo=True)
    try:
        with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
            _round_trip(Store(eng))
        logged = [r.getMessage() for r in caplog.records if r.name == "sqlalchemy.engine.Engine"]
        assert sum(m.startswith("WITH inserted AS") for m in logged) == 2
        assert any("FOR UPDATE SKIP LOCKED" in m for m in logged)
    finally:
        eng.dispose()


@pytest.fixture
def locked_row(engine: Engine) -> Iterator[int]:
    """A pending job whose row another transaction holds locked."""
    job_id = Store(engine).queue("paths").enqueue(b"held")
    with row_locked(engine, job_id):
        yield job_id


@pytest.mark.parametrize("observed", [False, True], ids=["cursor", "sqlalchemy"])
def test_errors_are_wrapped_alike_on_both_paths(
    database_url: URL, locked_row: int, observed: bool
) -> None:
    eng = create_engine(database_url, connect_args={"options": "-c lock_timeout=50"})
    if observed:
        event.listen(eng, "before_cursor_execute", lambda *a: None)
    try:
        q = Store(eng).queue("paths")
        with pytest.raises(OperationalError) as caught:
            q.cancel(locked_row)  # waits on the row lock, then lock_timeout
        assert type(caught.value.orig).__name__ == "LockNotAvailable"
        assert caught.value.statement is not None and "DELETE FROM" in caught.value.statement
        # The caller's values, beside the statement's own constants (G2's step states).
        assert caught.value.params.items() >= {"p_queue": "paths", "p_job_id": locked_row}.items()
        assert not caught.value.connection_invalidated
        assert q.get_job(locked_row) is not None  # the connection went back healthy
    finally:
        eng.dispose()
