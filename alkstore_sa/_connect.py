"""Shared by the sync and async stores: engines, sessions, error mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import URL, Connection
from sqlalchemy.exc import ProgrammingError

from . import _validate as v
from ._errors import SchemaMissingError, StoreClosedError
from ._url import normalize_url

T = TypeVar("T")


def check_engine(engine: object, expected: type, what: str) -> None:
    if not isinstance(engine, expected):
        raise TypeError(f"{what} takes a {expected.__name__}, got {type(engine).__name__}")
    dialect = engine.dialect  # type: ignore[attr-defined]
    if dialect.name != "postgresql":
        raise ValueError(f"{what} needs a PostgreSQL engine, got dialect {dialect.name!r}")
    # The store flips psycopg's own autocommit switch and the worker's
    # listener speaks psycopg's LISTEN API: other drivers would half-work.
    if dialect.driver != "psycopg":
        raise ValueError(
            f"{what} needs the psycopg 3 driver (postgresql+psycopg://...), "
            f"got {dialect.name}+{dialect.driver}"
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


@contextmanager
def schema_errors(schema: str) -> Iterator[None]:
    """A missing table or column means the migrations never ran, or are behind: say so."""
    try:
        yield
    except ProgrammingError as exc:
        state = getattr(exc.orig, "sqlstate", None)
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
