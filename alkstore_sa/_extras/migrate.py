"""``alkstore_sa.migrate()``: install or upgrade the store's schema from Python.

The same Alembic revisions, environment and version table as ``alkstore
migrate`` and ``alembic upgrade head`` from a checkout (M1): the package's own
environment, driven through Alembic's command API on a connection lent to it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sqlalchemy import URL, Connection, Engine, column, create_engine, inspect, pool, select, table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .._db.url import normalize_url
from .._values import validate as _validate
from .._values.errors import AlkstoreError
from ..migrations import VERSION_TABLE
from ..schema import DEFAULT_SCHEMA

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported where it is used: `import alkstore_sa` stays light
# (alembic's own import costs about as much as the rest of the package).

__all__ = ["migrate", "upgrade"]

Revisions = tuple[str, ...]
# How many other version tables to look into when the store's tables are
# there but its own version table is not (enough for any real database).
_MAX_VERSION_TABLES = 20


def migrate(
    target: Engine | Connection | AsyncEngine | URL | str, *, schema: str = DEFAULT_SCHEMA
) -> None:
    """Create or upgrade the store's tables in ``schema`` to the newest revision.

    The same Alembic revisions as ``alkstore migrate`` (and ``alembic upgrade
    head`` from a checkout), recorded in ``<schema>.alkstore_alembic_version``;
    the schema is created if missing.  Calling it again when the database is
    current changes nothing.

    ``target`` is a ``postgresql+psycopg`` URL (``postgresql://`` means
    psycopg 3; an engine is made and disposed of), an ``Engine``, an
    ``AsyncEngine`` (from code that is not itself inside a running event
    loop), or a ``Connection`` with no transaction in progress: the
    migrations commit on it.  From async code, lend a connection::

        async with async_engine.connect() as conn:
            await conn.run_sync(migrate, schema="alkstore")

    Raises ``InvalidNameError`` for a bad schema name before any SQL, and
    ``AlkstoreError`` when the store's tables are already there but were
    installed by another Alembic environment (a host application's that
    takes in the ``alkstore`` branch: run ``alembic upgrade heads`` there).
    Database failures are SQLAlchemy's own exceptions.
    """
    schema = _validate.schema_name(schema)
    if isinstance(target, Connection):
        if target.in_transaction():
            raise ValueError(
                "migrate() commits its own transactions: pass a Connection with no "
                "transaction in progress (commit or roll back first)"
            )
        upgrade(target, schema)
        return
    if isinstance(target, Engine):
        _check_postgresql(target.dialect.name)
        with target.connect() as conn:
            upgrade(conn, schema)
        return
    if isinstance(target, AsyncEngine):
        _check_postgresql(target.dialect.name)
        _migrate_async_engine(target, schema)
        return
    if isinstance(target, AsyncConnection):
        raise TypeError(
            "migrate() is synchronous; with an AsyncConnection, call "
            "`await conn.run_sync(migrate, schema=...)`"
        )
    if isinstance(target, URL | str):
        url = normalize_url(target, source="url")
        if url.get_dialect().driver != "psycopg":
            raise ValueError(
                f"migrate() needs a postgresql+psycopg:// URL (or postgresql://), got "
                f"{url.drivername!r}; pass an Engine to use another driver"
            )
        engine = create_engine(url, poolclass=pool.NullPool)
        try:
            with engine.connect() as conn:
                upgrade(conn, schema)
        finally:
            engine.dispose()
        return
    raise TypeError(
        "migrate() takes an Engine, AsyncEngine, Connection, URL or str, "
        f"got {type(target).__name__}"
    )


def _check_postgresql(dialect: str) -> None:
    if dialect != "postgresql":
        raise ValueError(f"migrate() needs a PostgreSQL engine, got dialect {dialect!r}")


def _migrate_async_engine(engine: AsyncEngine, schema: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "migrate(async_engine) cannot run inside a running event loop; use "
            "`async with engine.connect() as conn: await conn.run_sync(migrate, schema=...)`"
        )

    async def run() -> None:
        async with engine.connect() as conn:
            try:
                await conn.run_sync(upgrade, schema)
            finally:
                # Opened on this short-lived loop: never hand it back to the
                # pool, whose next user runs on another loop.
                await conn.invalidate()

    asyncio.run(run())


def current_revisions(conn: Connection, schema: str) -> Revisions:
    """The revisions ``<schema>.alkstore_alembic_version`` records (none: empty)."""
    from alembic.runtime.migration import MigrationContext

    ctx = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    return ctx.get_current_heads()


def upgrade(conn: Connection, schema: str) -> tuple[Revisions, Revisions]:
    """Upgrade ``schema`` to head on ``conn``; (revisions before, revisions after).

    ``conn`` has no transaction of the caller's in progress: this commits.
    """
    from alembic import command

    from ..migrations._config import alembic_config

    cfg = alembic_config(schema=schema)
    before = current_revisions(conn, schema)
    if not before:
        _refuse_foreign_install(conn, schema, cfg)
    conn.rollback()  # the env commits its own work; start it from a clean slate
    # The env uses a lent connection instead of opening its own (see _runner.run).
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "heads")
    after = current_revisions(conn, schema)
    conn.rollback()
    return before, after


def _refuse_foreign_install(conn: Connection, schema: str, cfg: Config) -> None:
    """The tables are there but our version table records nothing: whose are they?

    A host application's Alembic environment that takes in the ``alkstore``
    branch records our revisions in its own version table.  Upgrading here
    would try to create the tables again (``relation "jobs" already exists``).
    """
    from alembic.script import ScriptDirectory

    if not inspect(conn).has_table("jobs", schema=schema):
        return
    ours = {rev.revision for rev in ScriptDirectory.from_config(cfg).walk_revisions()}
    found = _version_tables_recording(conn, ours)
    where = f"schema {schema!r} already holds the store's tables"
    if found:
        name, revisions = found[0]
        raise AlkstoreError(
            f"{where}, installed by another Alembic environment ({name} records "
            f"{', '.join(revisions)}): upgrade them there with `alembic upgrade heads`, "
            f"not with alkstore's own migrations (their version table, "
            f"{schema}.{VERSION_TABLE}, is empty)"
        )
    raise AlkstoreError(
        f"{where}, but {schema}.{VERSION_TABLE} records no revision: if an application's "
        "own Alembic environment installed them, run `alembic upgrade heads` there instead"
    )


def _version_tables_recording(conn: Connection, ours: set[str]) -> list[tuple[str, list[str]]]:
    """Alembic version tables (a ``version_num`` column) holding any of ``ours``."""
    info = table(
        "columns",
        column("table_schema"),
        column("table_name"),
        column("column_name"),
        schema="information_schema",
    )
    candidates = conn.execute(
        select(info.c.table_schema, info.c.table_name)
        .where(info.c.column_name == "version_num", info.c.table_name != VERSION_TABLE)
        .order_by(info.c.table_schema, info.c.table_name)
        .limit(_MAX_VERSION_TABLES)
    ).all()
    found: list[tuple[str, list[str]]] = []
    for tschema, tname in candidates:
        versions = table(str(tname), column("version_num"), schema=str(tschema))
        try:
            with conn.begin_nested():  # a table we may not read must not abort the rest
                recorded = conn.execute(select(versions.c.version_num)).scalars().all()
        except DBAPIError:
            continue
        hits = sorted(str(r) for r in recorded if r in ours)
        if hits:
            found.append((f"{tschema}.{tname}", hits))
    return found
