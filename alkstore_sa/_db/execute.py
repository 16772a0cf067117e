"""Running one statement on a SQLAlchemy ``Connection`` and fetching its rows.

Every operation's statement arrives here already rendered to its text (see
``_sql/_render.py``).  It goes one of two ways, with the same SQL, the same
bound parameters and the same psycopg cursor call at the bottom:

- ``Connection.exec_driver_sql`` -- SQLAlchemy's execution path: logging
  (``echo``), ``before/after_cursor_execute`` and the other execution events,
  an execution context and a ``CursorResult``, and, on a transactional
  connection, the autobegin that lets ``commit()`` know a transaction exists.
- **Straight on the connection's DBAPI cursor**, when nothing could tell the
  difference: the driver is in autocommit (the statement is its own
  transaction, so there is nothing for SQLAlchemy's transaction bookkeeping
  to track), no engine, connection or dialect event is listened for, and
  the engine does not log statements.  This skips about 75 us of client CPU
  per statement (the execution context, result set-up and autobegin) -- on
  an enqueue, a third of what the client spends.  Errors still go through
  SQLAlchemy's own handler, so they come out wrapped the same way
  (``sqlalchemy.exc.DBAPIError`` subclasses, parameters shown or hidden as
  the engine says) and a dropped connection is invalidated in the pool just
  as ``exec_driver_sql`` would do it.

On asyncpg (the async face's other driver, rule D1) every statement runs through
``Connection.execute``: the pre-rendered text is psycopg's (its ``%(name)s``
placeholders and binary array dumps), and SQLAlchemy's asyncpg adapter
already prepares and caches each statement on the server, so the cursor path
would have nothing left to skip.

A statement the renderer cannot reproduce runs through ``Connection.execute``,
and so does every statement when a private SQLAlchemy member the two shortcuts
rely on is missing (``_sa_internals.py``, the only module that touches them).

``custom_plan=True`` keeps psycopg from preparing the statement, so
PostgreSQL plans it for its values on every run.  A prepared statement may
switch to one generic plan after five runs: the operations' reads (stats,
listings, queue names) would then get one plan for every queue, the big
and the small, once five runs made it look as cheap.  The claim and the
handle statements are prepared, and are meant to end on their generic plan:
they name the job statuses and the batch size in their text (``_render.py``),
so that plan uses the partial indexes and the claim is not planned again
on every run (about 0.4 ms of server CPU per claim, issue 30).
On asyncpg the same is done by preparing the statement afresh, outside the
adapter's prepared-statement cache (``_sa_internals.asyncpg_unprepared``): a
statement prepared once and run once always gets a custom plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import Connection, Executable

from .sa_internals import asyncpg_unprepared, fast_path, raise_dbapi_error, unobserved
from .sql._render import Rendered, rendered

if TYPE_CHECKING:
    from .address import StoreAddress

__all__ = ["fetch"]

Row = Sequence[Any]


def fetch(
    conn: Connection,
    address: StoreAddress,
    stmt: Executable,
    params: dict[str, Any],
    *,
    custom_plan: bool = False,
) -> list[Row]:
    """Run ``stmt`` with ``params`` on ``conn``; every row it returns, as tuples."""
    if conn.dialect.driver != "psycopg":
        if custom_plan:
            with asyncpg_unprepared(conn):
                return _public(conn, address, stmt, params)
        return _public(conn, address, stmt, params)
    if custom_plan:
        with _never_prepared(conn):
            return _fetch(conn, address, stmt, params)
    return _fetch(conn, address, stmt, params)


@contextmanager
def _never_prepared(conn: Connection) -> Iterator[None]:
    """psycopg prepares nothing inside (its threshold restored after)."""
    driver = conn.connection.driver_connection
    before = driver.prepare_threshold  # type: ignore[union-attr]
    driver.prepare_threshold = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        driver.prepare_threshold = before  # type: ignore[union-attr]


def _fetch(
    conn: Connection, address: StoreAddress, stmt: Executable, params: dict[str, Any]
) -> list[Row]:
    text = rendered(stmt, conn.dialect, address.schema) if fast_path(conn) else None
    if text is None:
        return _public(conn, address, stmt, params)
    bound = text.params(params)
    dbapi = conn.connection.dbapi_connection
    sql, raw = text.texts(bound)
    for name in text.inlined:  # in the text now, as SQLAlchemy's own execute leaves it
        del bound[name]
    if dbapi is not None and dbapi.autocommit and unobserved(conn):
        return _on_cursor(conn, dbapi, text, bound, sql, raw)
    return list(conn.exec_driver_sql(sql, bound).all())


def _public(
    conn: Connection, address: StoreAddress, stmt: Executable, params: dict[str, Any]
) -> list[Row]:
    result = conn.execute(stmt, params, execution_options=address.execution_options)
    return list(result.all())


def _on_cursor(
    conn: Connection,
    dbapi: Any,
    text: Rendered,
    params: dict[str, Any],
    sql: str,
    raw_sql: str | None,
) -> list[Row]:
    # A raw cursor (``$n`` placeholders) when the connection makes plain
    # cursors: psycopg then has no ``%(name)s`` text to convert (see
    # ``Rendered.raw``); the same statement, values and protocol otherwise.
    # A connection made with another cursor_factory keeps its own cursors.
    raw = raw_sql is not None and getattr(dbapi, "cursor_factory", None) is psycopg.Cursor
    cursor = psycopg.RawCursor(dbapi) if raw else dbapi.cursor()
    try:
        if raw:
            assert raw_sql is not None
            cursor.execute(raw_sql, text.positional(params))
        else:
            cursor.execute(sql, params)
        # Every statement of ours returns rows (RETURNING or SELECT).  Not
        # cursor.description: psycopg builds a Column object per column on
        # every read of it.
        rows: list[Row] = cursor.fetchall()
    except BaseException as exc:
        raise_dbapi_error(conn, exc, sql, params, cursor)
    finally:
        cursor.close()
    return rows


def fetch_in_one_go(
    conn: Connection,
    address: StoreAddress,
    calls: Sequence[tuple[Executable, dict[str, Any]]],
    *,
    generic_plans: bool = False,
) -> list[list[Row]] | None:
    """``calls`` as one transaction sent in one round trip -- ``BEGIN``, each
    statement, ``COMMIT`` through psycopg's pipeline -- and each one's rows.

    Each statement still runs on its own snapshot, after the ones before it
    (READ COMMITTED): a lock taken by the first is held, and seen, by the
    next, but no client round trip is spent while it is held.  ``None`` when
    this connection cannot (not the sync psycopg driver in autocommit on
    the cursor path, a statement not renderable): the caller then runs them
    its usual way.  A failure leaves no transaction open: it is rolled back,
    or the connection is dropped from the pool.

    ``generic_plans``: PostgreSQL runs the prepared statements on their
    generic plans, planned once per connection (``SET LOCAL``: for this
    transaction only).  For statements whose custom plans it would make on
    every run although the generic one is as good -- the limited claim, whose
    planning (~1 ms) was most of the time its queue's lock was held.
    """
    if conn.dialect.driver != "psycopg" or not fast_path(conn):
        return None
    dbapi: Any = conn.connection.dbapi_connection
    if (
        not isinstance(dbapi, psycopg.Connection)
        or not dbapi.autocommit
        or getattr(dbapi, "cursor_factory", None) is not psycopg.Cursor
        or not unobserved(conn)
        or not psycopg.Pipeline.is_supported()
    ):
        return None
    sent: list[tuple[str, list[Any], dict[str, Any]]] = []
    for stmt, params in calls:
        text = rendered(stmt, conn.dialect, address.schema)
        if text is None or text.raw is None:
            return None
        bound = text.params(params)
        raw = text.texts(bound)[1]
        assert raw is not None
        sent.append((raw, text.positional(bound), bound))
    cursors: list[psycopg.RawCursor[Any]] = []
    try:
        with dbapi.pipeline():
            dbapi.execute("BEGIN", prepare=False)
            if generic_plans:
                dbapi.execute("SET LOCAL plan_cache_mode = force_generic_plan", prepare=False)
            for raw, values, _bound in sent:
                cursor = psycopg.RawCursor(dbapi)
                cursor.execute(raw, values)
                cursors.append(cursor)
            dbapi.execute("COMMIT", prepare=False)
        return [cursor.fetchall() for cursor in cursors]
    except BaseException as exc:
        _end_transaction(conn, dbapi)
        # Which statement failed is not known here: the error shows them all.
        every = ";\n".join(raw for raw, _values, _bound in sent)
        shown = {k: v for _raw, _values, bound in sent for k, v in bound.items()}
        raise_dbapi_error(conn, exc, every, shown, cursors[-1] if cursors else None)
    finally:
        for cursor in cursors:
            cursor.close()


def _end_transaction(conn: Connection, dbapi: Any) -> None:
    # A failed statement makes the server skip the rest of the pipeline, its
    # COMMIT too: the transaction is left open, aborted.
    try:
        if dbapi.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            dbapi.execute("ROLLBACK", prepare=False)
    except Exception:
        conn.invalidate()
