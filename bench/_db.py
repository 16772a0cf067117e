"""The one PostgreSQL a run uses: a throwaway embedded server, or a given one.

Either way the run creates its own database (``alkstore_bench_<pid>``),
migrates it with the package's Alembic revisions, installs pgqueuer's schema
in it when pgqueuer is installed, and drops it at the end.  Nothing on the
server is tuned: it runs with ``initdb`` defaults (``fsync`` and
``synchronous_commit`` on), as a user's would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import URL

from alkstore_sa._extras.server import Server, given_server, start_embedded

ENV_VAR = "ALKSTORE_DATABASE_URL"


@dataclass
class Database:
    """The run's own database on ``server``, and the URLs each client needs."""

    server: Server
    name: str

    @property
    def embedded(self) -> bool:
        return self.server.embedded

    def sa_url(self) -> URL:
        """A ``postgresql+psycopg`` SQLAlchemy URL for the bench database."""
        return self.server.url(self.name)

    def async_url(self, driver: str) -> URL:
        """The SQLAlchemy URL of an async engine on ``driver`` (psycopg or asyncpg, D1)."""
        return self.sa_url().set(drivername=f"postgresql+{driver}")

    def dsn(self, dbname: str | None = None) -> str:
        """A libpq URI, understood by psycopg and asyncpg alike."""
        return self.server.dsn(dbname or self.name)

    def connect(self, **kw: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(), autocommit=True, **kw)

    def drop(self) -> None:
        with psycopg.connect(self.dsn(self.server.maintenance_db), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self.server.stop()  # an embedded server goes, with its directory


def open_database() -> Database:
    """Start (or reach) the server and create a fresh, empty bench database."""
    given = os.environ.get(ENV_VAR, "").strip()
    server = given_server(given) if given else start_embedded("alkstore-bench-pg-")
    db = Database(server, f"alkstore_bench_{os.getpid()}")
    try:
        with psycopg.connect(db.dsn(server.maintenance_db), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{db.name}"')
    except BaseException:
        server.stop()
        raise
    return db


def migrate(db: Database) -> None:
    """Install alkstore_sa's tables the way a user does: its Alembic revisions."""
    from alembic import command

    from alkstore_sa.migrations._config import alembic_config

    command.upgrade(alembic_config(url=db.sa_url()), "head")


def server_facts(db: Database) -> dict[str, str]:
    """The server settings that shape the figures, as the run saw them."""
    names = [
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "wal_level",
        "max_connections",
    ]
    with db.connect() as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]


def vacuum(db: Database, *tables: str) -> None:
    """Reclaim the dead tuples a previous case left, so cases start alike."""
    with db.connect() as conn:
        for table in tables:
            conn.execute(f"VACUUM (ANALYZE) {table}")
