"""Shared by the sync and async stores: engines, sessions, error mapping."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import URL, Connection
from sqlalchemy.exc import ProgrammingError

from . import _validate as v
from ._errors import SchemaMissingError, StoreClosedError
from ._url import normalize_url

T = TypeVar("T")

# The drivers the async face runs on (D1); the sync face is psycopg only.
ASYNC_DRIVERS = ("psycopg", "asyncpg")
# Before 2.0.50 SQLAlchemy's asyncpg adapter let asyncpg's InternalClientError
# (an operation cut off by a lost connection) through unwrapped and returned
# the broken connection to the pool: Q30 does not hold there.
ASYNCPG_MIN_SQLALCHEMY = (2, 0, 50)


def sqlalchemy_version() -> tuple[int, ...]:
    import sqlalchemy

    return tuple(int(part) for part in re.findall(r"\d+", sqlalchemy.__version__)[:3])


def check_engine(engine: object, expected: type, what: str) -> None:
    if not isinstance(engine, expected):
        raise TypeError(f"{what} takes a {expected.__name__}, got {type(engine).__name__}")
    dialect = engine.dialect  # type: ignore[attr-defined]
    if dialect.name != "postgresql":
        raise ValueError(f"{what} needs a PostgreSQL engine, got dialect {dialect.name!r}")
    # The store flips psycopg's own autocommit switch and the sync worker's
    # listener speaks psycopg's LISTEN API: other drivers would half-work.
    # The async face also runs on asyncpg (D1): SQLAlchemy's adapter gives
    # run_sync a sync-looking DBAPI connection, and the async worker's
    # listener has an asyncpg path of its own.
    allowed = ASYNC_DRIVERS if expected.__name__ == "AsyncEngine" else ("psycopg",)
    too_old = sqlalchemy_version() < ASYNCPG_MIN_SQLALCHEMY
    if dialect.driver == "asyncpg" and "asyncpg" in allowed and too_old:
        import sqlalchemy

        raise ValueError(
            f"{what} on asyncpg needs SQLAlchemy >= 2.0.50 (older versions pool a "
            f"connection an outage broke); found {sqlalchemy.__version__}: "
            "pip install 'alkstore-sa[asyncpg]'"
        )
    if dialect.driver not in allowed:
        if dialect.driver == "asyncpg":
            raise ValueError(
                f"{what} cannot drive asyncpg, an asyncio-only driver: use AsyncStore "
                "for a postgresql+asyncpg engine, or a postgresql+psycopg engine here"
            )
        raise ValueError(
            f"{what} needs the psycopg 3 driver (postgresql+psycopg://...)"
            + (" or asyncpg (postgresql+asyncpg://...)" if len(allowed) > 1 else "")
            + f", got {dialect.name}+{dialect.driver}"
        )


def url_for(url: str | URL) -> URL:
    return normalize_url(url, source="url")


class Lifecycle:
    """The open/closed state every store face shares (Q29)."""

    __slots__ = ("_closed", "schema")

    def __init__(self, schema: object) -> None:
        self.schema = v.schema_name(schema)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def close(self) -> bool:
        """Mark closed; ``True`` the first time only."""
        first = not self._closed
        self._closed = True
        return first


UNDEFINED_TABLE = "42P01"
UNDEFINED_COLUMN = "42703"


def sqlstate(error: BaseException | None) -> str | None:
    """The SQLSTATE of a driver error, whichever the driver (D1).

    psycopg's errors have ``sqlstate``; SQLAlchemy's asyncpg adapter wraps
    asyncpg's error in a DBAPI-style one that has it too on SQLAlchemy 2.1
    (``pgcode``/``sqlstate``), and always keeps asyncpg's own, which has
    ``sqlstate``, as its ``__cause__``.
    """
    while error is not None:
        state = getattr(error, "sqlstate", None)
        if isinstance(state, str):
            return state
        error = error.__cause__
    return None


@contextmanager
def schema_errors(schema: str) -> Iterator[None]:
    """A missing table or column means the migrations never ran, or are behind: say so."""
    try:
        yield
    except ProgrammingError as exc:
        state = sqlstate(exc.orig)
        if state in (UNDEFINED_TABLE, UNDEFINED_COLUMN):
            what = (
                f"no alkstore tables in schema {schema!r}"
                if state == UNDEFINED_TABLE
                else f"the alkstore tables in schema {schema!r} are older than this package"
            )
            raise SchemaMissingError(
                f"{what}: run `alkstore migrate` "
                "(or `alembic upgrade head`) against this database, or `alembic upgrade "
                "heads` in an application whose Alembic environment takes in the alkstore branch"
            ) from exc
        raise


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


def shutdown_fd(fd: int) -> None:
    """Shut down socket ``fd`` (from any thread): a blocked read on it ends at once.

    The wait ends with a connection error (libpq: "server closed the
    connection unexpectedly"), so whoever waits on a silent peer comes
    back and the connection is discarded.  A socket already gone is left
    alone.
    """
    try:
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more
    finally:
        dup.close()


def shutdown_socket(conn: Connection) -> None:
    """``shutdown_fd`` on the socket under ``conn``'s psycopg connection."""
    try:
        fd = conn.connection.dbapi_connection.pgconn.socket  # type: ignore[union-attr]
    except Exception:  # closed already, or not psycopg: nothing to break
        return
    shutdown_fd(fd)
