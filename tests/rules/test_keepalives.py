"""TCP keepalives and TCP_USER_TIMEOUT on the connections the library opens.

Client-side keepalives are socket options of the client's socket: nothing
on the server shows them.  So the connections here go over TCP (through the
chaos proxy, which forwards to the test server wherever it listens) and the
test reads the options back with ``getsockopt`` on the connection's socket.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, create_engine

from alkstore_sa import AsyncStore, Store
from alkstore_sa._db import engines as _engines
from alkstore_sa.cli._db import Database
from alkstore_sa.worker._listener import listen_conninfo

from .._pg import Server
from ..chaos._proxy import Proxy

DEFAULTS = {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
DEFAULT_USER_TIMEOUT = 30000


@pytest.fixture
def tcp_url(pg_server: Server, database_url: URL) -> Iterator[URL]:
    """``database_url`` reached over TCP (127.0.0.1, through a plain forwarding proxy)."""
    proxy = Proxy(pg_server.host, pg_server.port).start()
    try:
        yield proxy.url(database_url)
    finally:
        proxy.close()


def _options(fd: int) -> dict[str, int]:
    with socket.socket(fileno=socket.dup(fd)) as sock:
        opts = {
            "SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "TCP_KEEPIDLE": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "TCP_KEEPINTVL": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "TCP_KEEPCNT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "TCP_USER_TIMEOUT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    return {k: (1 if k == "SO_KEEPALIVE" and v else v) for k, v in opts.items()}


def _defaults() -> dict[str, int]:
    return {**DEFAULTS, "TCP_USER_TIMEOUT": DEFAULT_USER_TIMEOUT}


def _store_fd(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return _options(conn.connection.driver_connection.pgconn.socket)  # type: ignore[union-attr]


def test_store_from_url_sets_keepalives(tcp_url: URL) -> None:
    with Store.from_url(tcp_url) as store:
        assert _store_fd(store) == _defaults()


def test_store_from_url_keeps_the_urls_and_connect_args_settings(tcp_url: URL) -> None:
    url = tcp_url.update_query_dict({"keepalives_idle": "42"})
    with Store.from_url(url, connect_args={"tcp_user_timeout": 7000}) as store:
        got = _store_fd(store)
    assert got == {**_defaults(), "TCP_KEEPIDLE": 42, "TCP_USER_TIMEOUT": 7000}
    with Store.from_url(tcp_url, connect_args={"keepalives": 0}) as store:
        assert _store_fd(store)["SO_KEEPALIVE"] == 0  # switched off by the user: off


async def test_async_store_from_url_sets_keepalives_psycopg(tcp_url: URL) -> None:
    store = AsyncStore.from_url(tcp_url)
    try:
        async with store.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            got = _options(raw.driver_connection.pgconn.socket)  # type: ignore[union-attr]
    finally:
        await store.close()
    assert got == _defaults()


@pytest.mark.skipif(
    _engines.sqlalchemy_version() < _engines.ASYNCPG_MIN_SQLALCHEMY,
    reason="asyncpg needs SQLAlchemy >= 2.0.50 (the refusal: test_d1_asyncpg_old_sqlalchemy)",
)
async def test_async_store_from_url_sets_keepalives_asyncpg(tcp_url: URL) -> None:
    pytest.importorskip("asyncpg")
    store = AsyncStore.from_url(tcp_url.set(drivername="postgresql+asyncpg"))
    try:
        async with store.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            sock: Any = raw.driver_connection._transport.get_extra_info("socket")  # type: ignore[union-attr]
            got = _options(sock.fileno())
    finally:
        await store.engine.dispose()
    assert got == _defaults()


def test_listener_conninfo_carries_keepalives(tcp_url: URL) -> None:
    engine = create_engine(tcp_url)  # the application's own engine, no keepalives set
    try:
        with engine.connect() as conn:
            info = listen_conninfo(conn, application_name="alkstore test")
        with psycopg.connect(info, autocommit=True) as listener:
            assert _options(listener.pgconn.socket) == _defaults()
    finally:
        engine.dispose()
    # The engine's own settings win: they reach the listener as they are.
    engine = create_engine(tcp_url, connect_args={"keepalives_idle": 33})
    try:
        with engine.connect() as conn:
            info = listen_conninfo(conn, application_name="alkstore test")
        with psycopg.connect(info, autocommit=True) as listener:
            assert _options(listener.pgconn.socket)["TCP_KEEPIDLE"] == 33
    finally:
        engine.dispose()


def test_cli_engine_sets_keepalives(tcp_url: URL) -> None:
    engine = Database(tcp_url, "--database-url").engine()
    try:
        with engine.connect() as conn:
            got = _options(conn.connection.driver_connection.pgconn.socket)  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert got == _defaults()
