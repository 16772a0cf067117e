"""``alkstore_sa.migrate()``: the migrations from Python (M1, M4), and installs it must not touch.

Also ``alkstore migrate`` on a database whose store a host application's
Alembic environment installed (M3): it says so instead of failing on
``relation "jobs" already exists``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.schema import CreateSchema

import alkstore_sa
from alkstore_sa import AlkstoreError, InvalidNameError, Store, migrate
from alkstore_sa.migrations import VERSION_TABLE
from alkstore_sa.migrations._config import alembic_config
from alkstore_sa.schema import DEFAULT_SCHEMA, metadata

from ..cli.test_cli import alkstore, one_line_error
from ..docs.test_m3_host_app import build_host, read_recipe, run
from .test_migrations import OUR_TABLES, objects, tables_in


@pytest.fixture
def blank_engine(blank_database: URL) -> Iterator[Engine]:
    eng = create_engine(blank_database)
    yield eng
    eng.dispose()


def _head(url: URL) -> str:
    heads = ScriptDirectory.from_config(alembic_config(url=url)).get_heads()
    assert len(heads) == 1
    return heads[0]


def recorded(engine: Engine, schema: str = DEFAULT_SCHEMA) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT version_num FROM {schema}.{VERSION_TABLE}"))
        return [r[0] for r in rows]


def test_m1_migrate_is_exported() -> None:
    assert "migrate" in alkstore_sa.__all__
    assert alkstore_sa.migrate is migrate


def test_m1_migrate_installs_on_a_fresh_database_and_is_idempotent(
    blank_database: URL, blank_engine: Engine
) -> None:
    before = objects(blank_database)
    migrate(blank_database.render_as_string(hide_password=False))  # a str
    installed = objects(blank_database) - before
    assert tables_in(blank_database, DEFAULT_SCHEMA) == OUR_TABLES | {VERSION_TABLE}
    assert recorded(blank_engine) == [_head(blank_database)]
    migrate(blank_database)  # a URL; nothing left to do
    migrate(blank_engine)
    assert objects(blank_database) - before == installed
    assert recorded(blank_engine) == [_head(blank_database)]
    with Store(blank_engine) as store:
        q = store.queue("emails")
        assert q.get_job(q.enqueue(b"hi")) is not None


def test_m4_migrate_into_another_schema(blank_database: URL, blank_engine: Engine) -> None:
    migrate(blank_engine, schema="billing")
    assert tables_in(blank_database, "billing") == OUR_TABLES | {VERSION_TABLE}
    assert tables_in(blank_database, DEFAULT_SCHEMA) == set()
    migrate(blank_engine)  # a second, independent store in the same database
    assert tables_in(blank_database, DEFAULT_SCHEMA) == OUR_TABLES | {VERSION_TABLE}
    with Store(blank_engine, schema="billing") as billing, Store(blank_engine) as default:
        job_id = billing.queue("q").enqueue(b"only billing")
        assert default.queue("q").get_job(job_id) is None


def test_m1_migrate_on_a_lent_connection(blank_database: URL, blank_engine: Engine) -> None:
    with blank_engine.connect() as conn:
        migrate(conn, schema="lent")
        # It committed: another connection sees the tables.
        assert tables_in(blank_database, "lent") == OUR_TABLES | {VERSION_TABLE}
        conn.execute(text("SELECT 1"))  # the caller's transaction now ...
        with pytest.raises(ValueError, match="no transaction in progress"):
            migrate(conn, schema="lent")  # ... is not committed for it


def test_m1_migrate_with_an_async_engine(blank_database: URL) -> None:
    async_engine = create_async_engine(blank_database)
    migrate(async_engine, schema="from_async")
    assert tables_in(blank_database, "from_async") == OUR_TABLES | {VERSION_TABLE}

    async def use_it_again() -> int:
        # The engine stays usable from another event loop than the one migrate() ran.
        async with async_engine.connect() as conn:
            value = (await conn.execute(text("SELECT 1"))).scalar_one()
        await async_engine.dispose()
        return int(value)

    assert asyncio.run(use_it_again()) == 1


async def test_m1_migrate_from_async_code_through_run_sync(blank_database: URL) -> None:
    async_engine = create_async_engine(blank_database)
    try:
        with pytest.raises(RuntimeError, match="run_sync"):
            migrate(async_engine)  # inside a running loop
        async with async_engine.connect() as conn:
            await conn.run_sync(migrate, schema="in_loop")
            with pytest.raises(TypeError, match="run_sync"):
                migrate(conn)  # type: ignore[arg-type]
    finally:
        await async_engine.dispose()
    assert tables_in(blank_database, "in_loop") == OUR_TABLES | {VERSION_TABLE}


@pytest.mark.parametrize("bad", ["bad-name", "pg_x", "", "a" * 64])
def test_m4_migrate_refuses_a_bad_schema_name_before_any_sql(
    blank_database: URL, blank_engine: Engine, bad: str
) -> None:
    before = objects(blank_database)
    with pytest.raises(InvalidNameError):
        migrate(blank_engine, schema=bad)
    assert objects(blank_database) == before


def test_migrate_refuses_what_it_cannot_use(blank_database: URL) -> None:
    with pytest.raises(ValueError, match="postgresql\\+psycopg://"):
        migrate(blank_database.set(drivername="postgresql+asyncpg"))
    with pytest.raises(ValueError, match="PostgreSQL"):
        migrate("mysql://u@localhost/db")
    with pytest.raises(ValueError, match="dialect 'sqlite'"):
        migrate(create_engine("sqlite://"))
    with pytest.raises(TypeError, match="takes an Engine"):
        migrate(42)  # type: ignore[arg-type]


# --- a store some other Alembic environment installed ---------------------------------


def _host_installed(tmp: Path, url: URL) -> None:
    """The docs' host application (M3) ran `alembic upgrade heads`: the store is its."""
    build_host(tmp, read_recipe(), url)
    proc = run("alembic upgrade heads", tmp, url)
    assert proc.returncode == 0, proc.stderr
    assert ("alkstore", "jobs") in {(s, t) for s, t in _all_tables(url)}


def _all_tables(url: URL) -> set[tuple[str, str]]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            rows = conn.execute(text("SELECT schemaname, tablename FROM pg_tables"))
            return {(r[0], r[1]) for r in rows}
    finally:
        eng.dispose()


def test_m3_migrate_refuses_a_store_a_host_environment_installed(
    blank_database: URL, tmp_path: Path
) -> None:
    _host_installed(tmp_path, blank_database)
    before = objects(blank_database)
    with pytest.raises(AlkstoreError) as err:
        migrate(blank_database)
    message = str(err.value)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert f"public.alembic_version records {head}" in message
    assert "`alembic upgrade heads`" in message
    assert objects(blank_database) == before  # refused before any DDL

    # The command says the same in one line; it used to fail on `relation "jobs" already exists`.
    line = one_line_error(alkstore("migrate", url=blank_database), 1)
    assert "installed by another Alembic environment" in line
    assert "`alembic upgrade heads`" in line
    assert "already exists" not in line
    # Another schema of the same database is still ours to install.
    ok = alkstore("migrate", "--schema", "standalone", url=blank_database)
    assert ok.returncode == 0, ok.stderr


def test_migrate_refuses_tables_nothing_records(blank_database: URL, blank_engine: Engine) -> None:
    with blank_engine.begin() as conn:
        conn.execute(CreateSchema(DEFAULT_SCHEMA))
        metadata.create_all(conn)
    with pytest.raises(AlkstoreError, match=r"records no revision.*`alembic upgrade heads`"):
        migrate(blank_engine)
