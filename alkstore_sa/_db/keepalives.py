"""TCP keepalives on the connections the library opens itself (never the application's)."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from sqlalchemy import URL

from .sockets import asyncpg_socket

# Client-side TCP keepalives and TCP_USER_TIMEOUT (libpq parameters) on the
# connections the library opens itself: the engines of ``Store.from_url``/
# ``AsyncStore.from_url`` and of the CLI, and the worker's LISTEN connection.
# Without them a peer that vanished without a reset (a dropped network path, a
# failed-over host) leaves a connection waiting for the kernel's own timeouts:
# about two hours idle, or some 15 minutes of retransmissions.  With them, an
# idle connection is probed after 10 s and dropped after 3 unanswered probes 5 s
# apart (25 s), and unacknowledged data is given up on after 30 s.  libpq
# ignores them on a unix socket.  A parameter the URL or ``connect_args``
# already sets is never overridden.
KEEPALIVES: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",  # milliseconds
}


def keepalive_params(given: Mapping[str, object]) -> dict[str, str]:
    """The ``KEEPALIVES`` entries ``given`` (libpq parameters already set) lacks."""
    return {k: v for k, v in KEEPALIVES.items() if k not in given}


def keepalive_connect_args(url: URL, connect_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``connect_args`` with the keepalive defaults the URL and it leave unset.

    psycopg only: libpq takes them as connection parameters.  asyncpg has no
    such parameters (``asyncpg_keepalives`` sets the socket options instead).
    """
    args = dict(connect_args or {})
    if url.get_driver_name() == "psycopg":
        args.update(keepalive_params({**url.query, **args}))
    return args


def asyncpg_keepalives(engine: Any) -> None:
    """Set ``KEEPALIVES``' equivalents as socket options on each asyncpg connection.

    asyncpg takes no keepalive parameters; its connection's socket is
    reachable through its transport once connected, and Linux has the
    options (elsewhere the missing ones are skipped).  ``engine`` is the
    ``AsyncEngine``: the hook is its sync engine's ``connect`` event.
    """
    from sqlalchemy import event

    def on_connect(dbapi_connection: Any, _record: object) -> None:
        sock = asyncpg_socket(dbapi_connection.driver_connection)
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # a unix socket: nothing to keep alive
        options = [
            (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
            (socket.IPPROTO_TCP, "TCP_KEEPIDLE", int(KEEPALIVES["keepalives_idle"])),
            (socket.IPPROTO_TCP, "TCP_KEEPINTVL", int(KEEPALIVES["keepalives_interval"])),
            (socket.IPPROTO_TCP, "TCP_KEEPCNT", int(KEEPALIVES["keepalives_count"])),
            (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", int(KEEPALIVES["tcp_user_timeout"])),
        ]
        for level, name, value in options:
            option = getattr(socket, name, None)
            if option is not None:
                sock.setsockopt(level, option, value)

    event.listen(engine.sync_engine, "connect", on_connect)
