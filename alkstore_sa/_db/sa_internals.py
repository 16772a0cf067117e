"""The only place alkstore_sa touches private SQLAlchemy members; each one feature-detected.

What they buy: the *cursor path* of ``_execute.py`` -- a store-owned
(autocommit) statement, pre-rendered once by ``_sql/_render.py``, runs on the
connection's psycopg cursor instead of ``Connection.execute``.  That skips
SQLAlchemy's per-statement execution context, ``CursorResult`` and autobegin:
about a third of an enqueue's client CPU (the figures, measured before and
after, are in docs/benchmarks.md, "Round 3").  The private members, and why each:

``Connection._has_events``, ``Engine._has_events``, ``Dialect._has_events``
    Set by SQLAlchemy when an event listener of any kind exists.  The cursor
    path is taken only when all three are false, so no listener (an
    OpenTelemetry ``before_cursor_execute``, a user ``before_execute``) can
    miss a statement.  They are the flags SQLAlchemy itself tests before
    dispatching each event; no public API says "no listeners".
``Connection._echo``
    Whether this connection logs statements (``echo=True`` or the
    ``sqlalchemy.engine`` logger at INFO), as SQLAlchemy computed it when the
    connection was made.  Logged engines keep SQLAlchemy's path.
``Connection._handle_dbapi_exception``
    A driver error on the cursor path goes through SQLAlchemy's own handler:
    the same ``sqlalchemy.exc.DBAPIError`` subclass with the statement and
    parameters (hidden if the engine hides them), and a dropped connection
    invalidated in the pool, exactly as ``exec_driver_sql`` does it.
``SQLCompiler._bind_processors``
    The type processors ``Connection.execute`` applies to each parameter;
    the renderer applies the same ones to the pre-rendered text's values.
``AsyncAdapt_asyncpg_connection._prepared_statement_cache``
    asyncpg only, and not the cursor path: the adapter's cache of server-side
    prepared statements.  Set to ``None`` for one statement that must be
    planned for its values (``_execute.py``, ``custom_plan``), so it is
    prepared afresh and run once: always a custom plan.  Without it (another
    SQLAlchemy, asyncpg not installed) such statements run cached, as every
    other one does: the same results, possibly a generic plan.
``QueuePool._max_overflow``
    Not the cursor path: the worker sizes its connection use to the pool
    (``pool_capacity``), and only the overflow limit has no public reader.

Checked on SQLAlchemy 2.0.30 (the lower bound in pyproject.toml) and 2.1.9;
the dependency is capped below 2.2.  CI runs the statement/queue subset on the
oldest allowed version and the whole suite on the newest (``.ci/run``).

Detection: the members that live on a class are checked once, at import; the
two ``Connection`` sets on each instance (``_has_events`` has no class default
on 2.0) once, on the first connection seen.  If any is missing or of another
kind, the fast path is off for the process: every statement goes through
``Connection.execute(statement, params, execution_options=...)`` -- public
API, the same SQL and results, only slower -- and ``missing()`` names what
was not found.  ``pool_capacity`` answers 0 ("unknown") without
``_max_overflow``.  Nothing here is looked up again per statement beyond the
flags SQLAlchemy itself reads.

What detection cannot see is a member still there that no longer means the
same (a flag SQLAlchemy stopped setting): tests/sql/test_execute_paths.py (a
listener and ``echo`` see every statement, errors wrapped alike) and
tests/sql/test_sql_render.py (the same SQL and parameters as ``execute``) pin
the meaning, and CI runs them on the oldest and the newest SQLAlchemy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "REQUIRED",
    "asyncpg_unprepared",
    "Kind",
    "Member",
    "bind_processors",
    "detect",
    "fast_path",
    "missing",
    "pool_capacity",
    "raise_dbapi_error",
    "unobserved",
]


class Kind(Enum):
    CLASS_FLAG = "a bool on the class"
    METHOD = "a method"
    CLASS_PROPERTY = "a property-like descriptor on the class"
    INSTANCE_FLAG = "a bool on each instance"  # probed on the first connection


@dataclass(frozen=True, slots=True)
class Member:
    owner: type
    name: str
    kind: Kind

    def __str__(self) -> str:
        return f"{self.owner.__name__}.{self.name} ({self.kind.value})"

    def present_on(self, obj: object) -> bool:
        """Whether ``obj`` (the owner class, or an instance for INSTANCE_FLAG) has it."""
        if self.kind is Kind.INSTANCE_FLAG:
            return isinstance(getattr(obj, self.name, None), bool)
        found = inspect.getattr_static(obj, self.name, None)
        if self.kind is Kind.CLASS_FLAG:
            return isinstance(found, bool)
        if self.kind is Kind.METHOD:
            return inspect.isfunction(found)
        # SQLAlchemy's memoized_property (or a property / cached_property).
        return hasattr(type(found), "__get__") and not inspect.isfunction(found)


# What the fast path relies on (pool_capacity's member is handled on its own).
REQUIRED: tuple[Member, ...] = (
    Member(Engine, "_has_events", Kind.CLASS_FLAG),
    Member(Dialect, "_has_events", Kind.CLASS_FLAG),
    Member(Connection, "_handle_dbapi_exception", Kind.METHOD),
    Member(SQLCompiler, "_bind_processors", Kind.CLASS_PROPERTY),
    Member(Connection, "_has_events", Kind.INSTANCE_FLAG),
    Member(Connection, "_echo", Kind.INSTANCE_FLAG),
)

# True: every member found.  None: the class members found, the instance ones
# not yet probed (no connection seen).  False: something missing; final.
_available: bool | None = None
_missing: tuple[str, ...] = ()


def detect() -> None:
    """(Re)run the class checks; the instance checks rerun on the next connection."""
    global _available, _missing
    _missing = tuple(
        str(m) for m in REQUIRED if m.kind is not Kind.INSTANCE_FLAG and not m.present_on(m.owner)
    )
    _available = False if _missing else None


def _probe(conn: Connection) -> None:
    # Only reached with every class member found (_available is None), so
    # this is the whole list; two threads probing at once write the same.
    global _available, _missing
    _missing = tuple(
        str(m) for m in REQUIRED if m.kind is Kind.INSTANCE_FLAG and not m.present_on(conn)
    )
    _available = not _missing


def fast_path(conn: Connection) -> bool:
    """Whether the private members are all there (probing ``conn`` the first time)."""
    if _available is None:
        _probe(conn)
    return _available is True


def missing() -> tuple[str, ...]:
    """The members detection did not find (empty: all found, or not yet probed)."""
    return _missing


def unobserved(conn: Connection) -> bool:
    """Whether no event listener or statement log would see ``exec_driver_sql``.

    False whenever the fast path is off; call ``fast_path`` first so that the
    instance members have been probed.
    """
    return _available is True and not (
        conn._has_events or conn.engine._has_events or conn.dialect._has_events or conn._echo
    )


def raise_dbapi_error(
    conn: Connection, exc: BaseException, sql: str, params: dict[str, Any], cursor: Any
) -> NoReturn:
    """Wrap (or re-raise) ``exc`` exactly as ``exec_driver_sql`` would, invalidating
    the connection when the error says it is gone."""
    conn._handle_dbapi_exception(exc, sql, params, cursor, None)


def bind_processors(compiled: SQLCompiler) -> dict[str, Callable[[Any], Any]] | None:
    """The processors ``execute`` applies to ``compiled``'s parameters, by name.

    ``None`` when they cannot be reproduced: the fast path is off, or a
    processor is not a plain callable (per-element processors of a tuple type).
    """
    if _available is False:
        return None
    found = compiled._bind_processors
    if not isinstance(found, Mapping):
        return None
    processors: dict[str, Callable[[Any], Any]] = {}
    for name, process in found.items():
        if not callable(process):
            return None
        processors[name] = process
    return processors


_ASYNCPG_CACHE = "_prepared_statement_cache"


@contextmanager
def asyncpg_unprepared(conn: Connection) -> Iterator[None]:
    """Statements run inside are prepared afresh, not taken from (or put in) the
    asyncpg adapter's cache; a no-op where the cache is not found."""
    adapter = conn.connection.dbapi_connection
    slot = inspect.getattr_static(type(adapter), _ASYNCPG_CACHE, None)
    if slot is None or not hasattr(adapter, _ASYNCPG_CACHE):
        yield
        return
    before = getattr(adapter, _ASYNCPG_CACHE)
    setattr(adapter, _ASYNCPG_CACHE, None)
    try:
        yield
    finally:
        setattr(adapter, _ASYNCPG_CACHE, before)


def pool_capacity(engine: Engine | AsyncEngine) -> int:
    """How many connections ``engine``'s pool can hand out (0: unknown)."""
    pool = engine.pool
    # QueuePool's (and its async variants'); NullPool, StaticPool, ... have
    # no fixed size.  Set by QueuePool.__init__, so looked up on the pool.
    size = getattr(pool, "size", None)
    overflow = getattr(pool, "_max_overflow", None)
    if not callable(size) or type(overflow) is not int:
        return 0
    # -1: no limit (SQLAlchemy's own meaning; pool_size=0 sets it too).
    return 1 << 30 if overflow < 0 else int(size()) + overflow


detect()
