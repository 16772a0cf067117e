"""SQLSTATEs the library acts on, read from whichever driver raised them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, ProgrammingError

from .._values.errors import SchemaMissingError

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


def read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's "read-only transaction" (SQLSTATE 25006)."""
    return isinstance(exc, DBAPIError) and sqlstate(exc.orig) == READ_ONLY_SQL_TRANSACTION
