"""The chaos proxy itself: it forwards, cuts during a COMMIT, and blackholes."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from sqlalchemy import URL

from .._pg import Server
from ._proxy import Proxy

pytestmark = pytest.mark.chaos


def _dsn(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def test_proxy_forwards_and_cuts_right_after_a_commit(pg_server: Server, database_url: URL) -> None:
    proxy = Proxy(pg_server.host, pg_server.port).start()
    try:
        via = _dsn(proxy.url(database_url))
        with psycopg.connect(_dsn(database_url), autocommit=True) as direct:
            direct.execute("CREATE TABLE proxied (n int)")
            with psycopg.connect(via) as conn:
                conn.execute("INSERT INTO proxied VALUES (1)")
                conn.commit()
                assert conn.execute("SELECT count(*) FROM proxied").fetchone() == (1,)
                conn.rollback()
                conn.execute("INSERT INTO proxied VALUES (2)")
                proxy.cut_next_commit()
                with pytest.raises(psycopg.OperationalError):
                    conn.commit()
            [cut] = proxy.cuts
            assert cut.during_commit and cut.reason == "commit"
            # The COMMIT reached the server: it committed, the client was never told.
            deadline = time.monotonic() + 5
            while direct.execute("SELECT count(*) FROM proxied").fetchone() != (2,):
                assert time.monotonic() < deadline
                time.sleep(0.02)
    finally:
        proxy.close()


def test_proxy_blackholes_the_connection_that_sent_a_matching_statement(
    pg_server: Server, database_url: URL
) -> None:
    proxy = Proxy(pg_server.host, pg_server.port).start()
    try:
        via = _dsn(proxy.url(database_url))
        with (
            psycopg.connect(via, autocommit=True) as other,
            psycopg.connect(via, autocommit=True) as held,
        ):
            proxy.blackhole_next(lambda sql: "pg_sleep" in sql)
            held.execute("SELECT 1")
            [c] = [c for c in proxy.snapshot() if c.saw("SELECT 1")]
            t0 = time.monotonic()
            cur = held.cursor()
            done = threading.Event()

            def run() -> None:
                with contextlib.suppress(psycopg.Error):
                    cur.execute("SELECT pg_sleep(0)")
                done.set()

            threading.Thread(target=run, daemon=True).start()
            assert not done.wait(0.5)  # its reply is held: the client waits
            assert other.execute("SELECT 2").fetchone() == (2,)  # the others flow
            proxy.heal()
            assert done.wait(5)
            assert time.monotonic() - t0 < 6
            assert c in proxy.blackholed
    finally:
        proxy.close()


def test_proxy_latency_and_blackhole_all(pg_server: Server, database_url: URL) -> None:
    proxy = Proxy(pg_server.host, pg_server.port).start()
    try:
        with psycopg.connect(_dsn(proxy.url(database_url)), autocommit=True) as conn:
            conn.execute("SELECT 1")
            proxy.latency = 0.1
            t0 = time.monotonic()
            conn.execute("SELECT 1")
            assert time.monotonic() - t0 >= 0.2  # each way waits
            proxy.latency = 0.0
            proxy.blackhole_all(0.5)
            t0 = time.monotonic()
            assert conn.execute("SELECT 2").fetchone() == (2,)  # held, then forwarded
            assert 0.4 <= time.monotonic() - t0 < 5
            assert proxy.cuts == []  # a blackhole is no reset: the socket stayed open
    finally:
        proxy.close()
