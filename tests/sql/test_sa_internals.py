"""The private SQLAlchemy members the fast path relies on (``alkstore_sa/_sa_internals.py``).

On the SQLAlchemy installed (CI runs this file on the oldest allowed version
and the newest) every member is found and the cursor path is taken.  With a
member missing -- simulated by adding one that no SQLAlchemy has to the list
detection checks, at class level (found at import) or per instance (found on
the first connection) -- every statement goes through ``Connection.execute``
against the real server: the round trip still works, errors are still
``sqlalchemy.exc`` classes, and neither the cursor nor the pre-rendered text
is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import URL, Connection, Engine, Executable, TextClause, create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from alkstore_sa import Store
from alkstore_sa._db import execute as _execute
from alkstore_sa._db import sa_internals as sa
from alkstore_sa._db.sa_internals import Kind, Member

from .._locks import row_locked
from .test_execute_paths import _round_trip

# The statements _round_trip runs: enqueue, enqueue_many, the park a queue's
# first claim runs (S3), claim, heartbeat, ack, ack_batch, get_job.
ROUND_TRIP_STATEMENTS = 8

GONE = {
    "class member gone": Member(Connection, "_alkstore_gone", Kind.METHOD),
    "instance member gone": Member(Connection, "_alkstore_gone", Kind.INSTANCE_FLAG),
}


@pytest.fixture(autouse=True)
def fresh_detection() -> Iterator[None]:
    """Each test starts from, and leaves behind, detection as at import."""
    sa.detect()
    yield
    sa.detect()


@pytest.fixture(params=["members present", *GONE])
def members(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param in GONE:
        monkeypatch.setattr(sa, "REQUIRED", (*sa.REQUIRED, GONE[request.param]))
        sa.detect()
    return str(request.param)


class PathSpy:
    """Which way each statement went, without an event listener (one would
    switch the cursor path off by itself)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # Connection.execute(<Core statement>); not the tests' own text() SQL.
        self.executed: list[Executable] = []
        self.driver_sql: list[str] = []  # Connection.exec_driver_sql(<text>)
        self.cursor: list[str] = []  # straight on the psycopg cursor
        execute, exec_driver_sql, on_cursor = (
            Connection.execute,
            Connection.exec_driver_sql,
            _execute._on_cursor,
        )

        def spy_execute(conn: Connection, stmt: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(stmt, TextClause):
                self.executed.append(stmt)
            return execute(conn, stmt, *args, **kwargs)

        def spy_driver_sql(conn: Connection, sql: str, *args: Any, **kwargs: Any) -> Any:
            if "alkstore" in sql:  # not the dialect's own first-connect queries
                self.driver_sql.append(sql)
            return exec_driver_sql(conn, sql, *args, **kwargs)

        def spy_cursor(conn: Connection, dbapi: Any, text: Any, *args: Any) -> Any:
            self.cursor.append(text)
            return on_cursor(conn, dbapi, text, *args)

        monkeypatch.setattr(Connection, "execute", spy_execute)
        monkeypatch.setattr(Connection, "exec_driver_sql", spy_driver_sql)
        monkeypatch.setattr(_execute, "_on_cursor", spy_cursor)


def test_every_member_is_found_on_this_sqlalchemy(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[Connection] = []
    probe = sa._probe

    def counted(conn: Connection) -> None:
        probes.append(conn)
        probe(conn)

    monkeypatch.setattr(sa, "_probe", counted)
    assert sa.missing() == ()
    with engine.connect() as conn:
        assert sa.fast_path(conn), f"SQLAlchemy {sqlalchemy.__version__}: {sa.missing()}"
    assert sa.missing() == ()
    Store(engine).queue("once").enqueue_many([b"a", b"b"])
    assert len(probes) == 1  # the first connection only, not each statement
    classes = [m for m in sa.REQUIRED if m.kind is not Kind.INSTANCE_FLAG]
    assert classes and all(m.present_on(m.owner) for m in classes)


def test_a_member_of_another_kind_counts_as_missing() -> None:
    class Changed:
        _flag = "yes"
        _method = None
        _prop = staticmethod(len)

        def _was_property(self) -> int:
            return 0

    assert not Member(Changed, "_flag", Kind.CLASS_FLAG).present_on(Changed)
    assert not Member(Changed, "_method", Kind.METHOD).present_on(Changed)
    assert not Member(Changed, "_was_property", Kind.CLASS_PROPERTY).present_on(Changed)
    assert not Member(Changed, "_flag", Kind.INSTANCE_FLAG).present_on(Changed())
    assert not Member(Changed, "_nothing", Kind.INSTANCE_FLAG).present_on(Changed())


def test_a_missing_member_is_named_and_switches_the_fast_path_off(
    members: str, engine: Engine
) -> None:
    if members == "class member gone":  # known at import, before any connection
        assert sa.missing() == (str(GONE[members]),)
    with engine.connect() as conn:
        assert sa.fast_path(conn) is (members == "members present")
        assert not sa.unobserved(conn) or members == "members present"
    if members in GONE:
        assert sa.missing() == (str(GONE[members]),)
        assert "Connection._alkstore_gone" in sa.missing()[0]


def test_operations_take_the_public_path_when_a_member_is_missing(
    members: str, qs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = PathSpy(monkeypatch)
    _round_trip(qs)
    if getattr(qs, "wrapped", qs).engine.dialect.driver == "asyncpg":
        # D1: asyncpg always takes the public path, members or not.
        assert not spy.cursor and not spy.driver_sql
        assert len(spy.executed) == ROUND_TRIP_STATEMENTS
        return
    if members == "members present":  # the control: the cursor path, not execute()
        # (No test may listen on a whole class -- Engine, Connection: SQLAlchemy
        # keeps that class flagged as observed for the rest of the process.)
        assert len(spy.cursor) == ROUND_TRIP_STATEMENTS
        assert not spy.driver_sql and not spy.executed
        return
    assert not spy.cursor and not spy.driver_sql  # not even the pre-rendered text
    assert len(spy.executed) == ROUND_TRIP_STATEMENTS
    assert all(isinstance(stmt, Executable) for stmt in spy.executed)
    assert sa.missing() == (str(GONE[members]),)


@pytest.mark.parametrize("gone", sorted(GONE))
def test_errors_are_sqlalchemy_errors_on_the_public_path(
    gone: str, engine: Engine, database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sa, "REQUIRED", (*sa.REQUIRED, GONE[gone]))
    sa.detect()
    job_id = Store(engine).queue("paths").enqueue(b"held")
    spy = PathSpy(monkeypatch)
    eng = create_engine(database_url, connect_args={"options": "-c lock_timeout=50"})
    try:
        q = Store(eng).queue("paths")
        with row_locked(engine, job_id), pytest.raises(DBAPIError) as caught:
            q.cancel(job_id)  # waits on the row lock, then lock_timeout
        assert type(caught.value).__name__ == "OperationalError"
        assert type(caught.value.orig).__name__ == "LockNotAvailable"
        assert caught.value.statement is not None and "DELETE FROM" in caught.value.statement
        assert isinstance(caught.value.params, dict)
        assert caught.value.params["p_job_id"] == job_id
        assert not caught.value.connection_invalidated
        assert q.get_job(job_id) is not None  # the connection went back healthy
        assert not spy.cursor and len(spy.executed) == 2
    finally:
        eng.dispose()


def test_pool_capacity(database_url: URL) -> None:
    def capacity(**kw: Any) -> int:
        eng = create_engine(database_url, **kw)
        try:
            return sa.pool_capacity(eng)
        finally:
            eng.dispose()

    assert capacity(pool_size=4, max_overflow=3) == 7
    assert capacity(pool_size=4, max_overflow=0) == 4
    assert capacity(pool_size=4, max_overflow=-1) == 1 << 30  # no overflow limit
    assert capacity(pool_size=0) == 1 << 30  # SQLAlchemy: no limit at all
    assert capacity(poolclass=NullPool) == 0  # no fixed size: unknown
    aeng = create_async_engine(database_url, pool_size=2, max_overflow=1)
    assert sa.pool_capacity(aeng) == 3
    aeng.sync_engine.dispose()


def test_pool_capacity_is_unknown_without_max_overflow(
    database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = create_engine(database_url, pool_size=4, max_overflow=3)
    try:
        monkeypatch.delattr(eng.pool, "_max_overflow")  # a SQLAlchemy without it
        assert sa.pool_capacity(eng) == 0
        monkeypatch.undo()  # dispose() reads it
    finally:
        eng.dispose()
