"""The socket under a driver connection, and shutting it down to end a wait on a silent peer."""

from __future__ import annotations

import os
import socket
from typing import Any

from sqlalchemy import Connection


def asyncpg_socket(driver: Any) -> Any:
    """The socket under an asyncpg connection, or None (closed, or not asyncpg as we know it).

    asyncpg has no public way to it: its asyncio transport has it.
    """
    try:
        return driver._transport.get_extra_info("socket")
    except Exception:
        return None


def driver_fd(driver: Any) -> int | None:
    """The socket descriptor under a driver connection: psycopg's (sync or async)
    ``pgconn.socket``, or asyncpg's; None when it is closed or out of reach."""
    try:
        if hasattr(driver, "pgconn"):
            return int(driver.pgconn.socket)
        sock = asyncpg_socket(driver)
        return None if sock is None else int(sock.fileno())
    except Exception:
        return None


def shutdown_fd(fd: int) -> None:
    """Shut down socket ``fd`` (from any thread): a blocked read on it ends at once.

    The wait ends with a connection error (libpq: "server closed the
    connection unexpectedly"), so whoever waits on a silent peer comes
    back and the connection is discarded.  A socket already gone is left
    alone.
    """
    try:
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more
    finally:
        dup.close()


def shutdown_socket(conn: Connection) -> None:
    """``shutdown_fd`` on the socket under ``conn``'s driver connection.

    psycopg (sync or async) has it as ``pgconn.socket``; asyncpg on its
    transport.  A connection already closed is left alone.
    """
    try:
        fd = driver_fd(conn.connection.driver_connection)
    except Exception:  # closed already
        return
    if fd is not None:
        shutdown_fd(fd)
