"""Calls on connections the store checked out itself: autocommit, read-only sessions dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from .sqlstate import read_only

T = TypeVar("T")


def in_autocommit(call: Callable[[Connection], T]) -> Callable[[Connection], T]:
    """``call`` run on a plain pooled connection switched to driver autocommit.

    Same effect as a connection of ``engine.execution_options(isolation_level=
    "AUTOCOMMIT")``: one statement, no BEGIN/COMMIT.  But that engine sets
    and resets the isolation level through SQLAlchemy's connection-
    characteristics machinery on every checkout (events, level validation,
    four driver setter calls), about a quarter of a one-statement
    operation's client CPU; here it is one switch each way.
    The connection goes back to the pool as it came (the previous setting is
    restored), or is invalidated if that cannot be done.
    """

    def run(conn: Connection) -> T:
        dbapi = conn.connection.dbapi_connection
        before = dbapi.autocommit  # type: ignore[union-attr]
        if not before:
            dbapi.autocommit = True  # type: ignore[union-attr]
        try:
            return call(conn)
        finally:
            if not before and not conn.invalidated:
                try:
                    dbapi.autocommit = False  # type: ignore[union-attr]
                except Exception:
                    # A broken connection: never pool it still in autocommit.
                    conn.invalidate()

    return run


def drop_if_read_only(conn: Connection, exc: BaseException) -> None:
    """Invalidate ``conn`` (one the store or the worker checked out itself) when
    ``exc`` says its session is read-only.

    ``pool_pre_ping`` passes such a connection (``SELECT 1`` works on a
    standby), and the session stays read-only for its whole life, so a pool
    given it back would hand it out again on every checkout -- after a
    failover, forever.  Invalidated, the next checkout opens a new
    connection, and a multi-host URL with ``target_session_attrs=read-write``
    lands it on the new primary.
    """
    if read_only(exc) and not conn.invalidated:
        conn.invalidate()


def own_connection(call: Callable[[Connection], T]) -> Callable[[Connection], T]:
    """``call`` on a connection the store checked out itself (``drop_if_read_only``)."""

    def run(conn: Connection) -> T:
        try:
            return call(conn)
        except DBAPIError as exc:
            drop_if_read_only(conn, exc)
            raise

    return run
