"""Shared by the sync and async stores: engines, sessions, error mapping."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import URL, Connection
from sqlalchemy.exc import DBAPIError, ProgrammingError

from .._values import validate as v
from .._values.errors import SchemaMissingError, StoreClosedError
from .url import normalize_url

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


# Client-side TCP keepalives and TCP_USER_TIMEOUT (libpq parameters) on the
# connections the library opens itself: the engines of ``Store.from_url``/
# ``AsyncStore.from_url`` and of the CLI, and the worker's LISTEN connection.
# Without them a peer that vanished without a reset (a dropped network path, a
# failed-over host) leaves a connection waiting for the kernel's own timeouts:
# about two hours idle, or some 15 minutes of retransmissions.  With them, an
# idle connection is probed after 10 s and dropped after 3 unanswered probes 5 s
# apart (25 s), and unacknowledged data is given up on after 30 s.  libpq
# ignores them on a unix socket.  A parameter the URL or ``connect_args``
# already sets is never overridden.
KEEPALIVES: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",  # milliseconds
}


def keepalive_params(given: Mapping[str, object]) -> dict[str, str]:
    """The ``KEEPALIVES`` entries ``given`` (libpq parameters already set) lacks."""
    return {k: v for k, v in KEEPALIVES.items() if k not in given}


def keepalive_connect_args(url: URL, connect_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``connect_args`` with the keepalive defaults the URL and it leave unset.

    psycopg only: libpq takes them as connection parameters.  asyncpg has no
    such parameters (``asyncpg_keepalives`` sets the socket options instead).
    """
    args = dict(connect_args or {})
    if url.get_driver_name() == "psycopg":
        args.update(keepalive_params({**url.query, **args}))
    return args


def asyncpg_keepalives(engine: Any) -> None:
    """Set ``KEEPALIVES``' equivalents as socket options on each asyncpg connection.

    asyncpg takes no keepalive parameters; its connection's socket is
    reachable through its transport once connected, and Linux has the
    options (elsewhere the missing ones are skipped).  ``engine`` is the
    ``AsyncEngine``: the hook is its sync engine's ``connect`` event.
    """
    from sqlalchemy import event

    def on_connect(dbapi_connection: Any, _record: object) -> None:
        sock = asyncpg_socket(dbapi_connection.driver_connection)
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # a unix socket: nothing to keep alive
        options = [
            (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
            (socket.IPPROTO_TCP, "TCP_KEEPIDLE", int(KEEPALIVES["keepalives_idle"])),
            (socket.IPPROTO_TCP, "TCP_KEEPINTVL", int(KEEPALIVES["keepalives_interval"])),
            (socket.IPPROTO_TCP, "TCP_KEEPCNT", int(KEEPALIVES["keepalives_count"])),
            (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", int(KEEPALIVES["tcp_user_timeout"])),
        ]
        for level, name, value in options:
            option = getattr(socket, name, None)
            if option is not None:
                sock.setsockopt(level, option, value)

    event.listen(engine.sync_engine, "connect", on_connect)


def asyncpg_socket(driver: Any) -> Any:
    """The socket under an asyncpg connection, or None (closed, or not asyncpg as we know it).

    asyncpg has no public way to it: its asyncio transport has it.
    """
    try:
        return driver._transport.get_extra_info("socket")
    except Exception:
        return None


def driver_fd(driver: Any) -> int | None:
    """The socket descriptor under a driver connection: psycopg's (sync or async)
    ``pgconn.socket``, or asyncpg's; None when it is closed or out of reach."""
    try:
        if hasattr(driver, "pgconn"):
            return int(driver.pgconn.socket)
        sock = asyncpg_socket(driver)
        return None if sock is None else int(sock.fileno())
    except Exception:
        return None


def url_for(url: str | URL) -> URL:
    return normalize_url(url, source="url")


def owned_engine_args(url: str | URL, engine_kw: Mapping[str, Any]) -> tuple[URL, dict[str, Any]]:
    """The URL and engine arguments of a store that makes (and owns) its engine.

    ``pool_pre_ping=True`` and the keepalive defaults, each unless the
    caller's arguments (or the URL) set it; asyncpg's keepalives are socket
    options, set by ``asyncpg_keepalives`` on the engine once it is made.
    """
    parsed = url_for(url)
    kw = {"pool_pre_ping": True, **engine_kw}
    kw["connect_args"] = keepalive_connect_args(parsed, kw.get("connect_args"))
    return parsed, kw


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
# The server refused a write because the session is read-only: a standby, a
# primary demoted by a failover, or default_transaction_read_only turned on.
READ_ONLY_SQL_TRANSACTION = "25006"


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


def read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's "read-only transaction" (SQLSTATE 25006)."""
    return isinstance(exc, DBAPIError) and sqlstate(exc.orig) == READ_ONLY_SQL_TRANSACTION


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
    """``shutdown_fd`` on the socket under ``conn``'s driver connection.

    psycopg (sync or async) has it as ``pgconn.socket``; asyncpg on its
    transport.  A connection already closed is left alone.
    """
    try:
        fd = driver_fd(conn.connection.driver_connection)
    except Exception:  # closed already
        return
    if fd is not None:
        shutdown_fd(fd)
