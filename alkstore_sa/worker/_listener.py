"""The listener: one dedicated connection that LISTENs (psycopg, or asyncpg for D1).

It is not taken from the SQLAlchemy pool: a pooled connection would carry
its LISTEN registrations back into the pool, and ``notifies()`` holds the
connection for as long as the worker runs.  Each time LISTEN is (re)
established every queue is woken once, because notifications sent while
the connection was down are lost (Q26: a worker claims right after its
LISTEN is established).  When the connection drops it reconnects with a
capped exponential backoff; meanwhile the producers' re-poll timers keep
jobs moving.

Where it connects is read, before every (re)connect, off a connection the
store's engine itself made (its libpq parameters and password): so the
URL, ``create_engine(connect_args=...)``, a ``creator`` or a ``do_connect``
hook reach the listener as they reach the pool.  (A short-lived password,
such as a cloud IAM token, is the one of the pooled connection it reads:
give such a pool a ``pool_recycle`` shorter than the token's life.)

On an ``AsyncStore`` over asyncpg (D1) the connection is one the engine
makes for the purpose and detaches from its pool at once (``aio.
detached_connection``): the same hooks reach it, and its LISTEN never goes
back to the pool.  It listens through asyncpg's own API (``add_listener``,
whose callbacks the connection runs on the loop as notifications arrive;
``add_termination_listener`` says when it is gone).  The loop around it --
the wake-every-queue after each (re)LISTEN, the backoff, the liveness probe
-- is the same ``_ListenLoop``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .._db.keepalives import keepalive_params
from .._db.sockets import driver_fd, shutdown_fd
from ._port import QueuePort, Recovery, Wake
from ._state import reraise_if_cancelled

if TYPE_CHECKING:
    from ..aio import AsyncStore

__all__ = [
    "NO_RECOVERY",
    "AsyncpgListener",
    "Listener",
    "listen",
    "listen_asyncpg",
    "listen_conninfo",
]

log = logging.getLogger("alkstore_sa.worker")

RECONNECT_FIRST = 0.05  # seconds before the first reconnect attempt
RECONNECT_CAP = 5.0  # the longest wait between attempts
# With no notification for this long, ask the server whether the connection
# is still alive: a silently dead peer would otherwise never raise.
LIVENESS_INTERVAL = 30.0
# How long that probe waits for its answer.  A peer that went silent without
# a reset never answers and, when something on the path still acknowledges
# TCP (a frozen server's kernel, a proxy), keepalives never end the wait:
# past this the connection is broken here and the listener reconnects.
LIVENESS_TIMEOUT = 10.0


class _PlainBackoff:
    """The ``Recovery`` of a listener with no other database calls to learn from
    (R3's waiters): its backoff is a plain sleep."""

    recoveries = 0

    async def backoff(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False


NO_RECOVERY: Recovery = _PlainBackoff()


def listen_conninfo(conn: Connection, *, application_name: str) -> str:
    """A psycopg connection string that reaches where ``conn`` (the engine's) went.

    Read off a connection of the engine's own pool: its libpq parameters
    (``info.dsn``, which leaves the password out) and its password.  The
    ``application_name`` is always the worker's own (``alkstore <worker_id>``),
    so the LISTEN backend can be told apart from the pool's in
    ``pg_stat_activity``.  Run as a store call (the worker's backend runs it
    on a daemon thread or on the loop), so a stop never waits on a connect.
    """
    info = conn.connection.driver_connection.info  # type: ignore[union-attr]
    extra = {"password": info.password} if info.password else {}
    # The engine's own keepalive settings carry over in ``dsn``; where it has
    # none, the library's defaults: a LISTEN connection is idle
    # most of the time, exactly when a vanished peer goes unnoticed.
    extra.update(keepalive_params(conninfo_to_dict(info.dsn)))
    return make_conninfo(info.dsn, application_name=application_name[:63], **extra)


class _ListenLoop:
    """LISTENs on ``channels`` and calls ``wake(channel, payload)`` for each notification.

    ``on_listening(True)`` runs after every successful (re)LISTEN,
    ``on_listening(False)`` when an established LISTEN is lost.  A subclass
    says how to connect and listen (``_listen_once``) and how to let go
    (``_close``); the reconnecting loop is this one.
    """

    def __init__(
        self,
        channels: list[str],
        wake: Wake,
        on_listening: Callable[[bool], None],
        recovery: Recovery,
    ) -> None:
        self._channels = channels
        self._wake = wake
        self._on_listening = on_listening
        self._recovery = recovery
        self._established = 0  # how many times LISTEN was established (for the logs)
        self._listening = False

    async def run(self) -> None:
        """Listen until cancelled, reconnecting when the connection drops."""
        delay = RECONNECT_FIRST
        seen = self._recovery.recoveries
        while True:
            self._listening = False
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any driver or OS error: reconnect
                reraise_if_cancelled(exc)
                what = "connection lost" if self._listening else "cannot connect"
                log.warning("listener %s: %s; reconnecting in %.2fs", what, exc, delay)
            finally:
                if self._listening:
                    self._on_listening(False)
                await self._close()
            # The backoff restarts from its floor after LISTEN was established
            # (the first success after failed connects), and whenever the
            # database answered the worker's other calls again since the last
            # attempt; a wait under way ends when it does.  So a connection
            # killed as a fault ends is back at once, not after a wait grown
            # while the server refused.  Only connects that fail in a row
            # while nothing else gets through back off further (to the cap).
            if self._listening or self._recovery.recoveries != seen:
                delay = RECONNECT_FIRST
            seen = self._recovery.recoveries
            await self._recovery.backoff(delay)
            delay = min(delay * 2, RECONNECT_CAP)

    def _established_now(self) -> None:
        self._established += 1
        self._listening = True
        if self._established > 1:
            log.info("listener reconnected; LISTEN on %d channel(s)", len(self._channels))
        else:
            log.debug("listener up; LISTEN on %s", ", ".join(self._channels))
        self._on_listening(True)

    async def _listen_once(self) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError


class Listener(_ListenLoop):
    """The psycopg listener: its own autocommit connection to ``conninfo()``."""

    def __init__(
        self,
        conninfo: Callable[[], Awaitable[str]],
        channels: list[str],
        wake: Wake,
        on_listening: Callable[[bool], None],
        recovery: Recovery,
    ) -> None:
        super().__init__(channels, wake, on_listening, recovery)
        self._conninfo = conninfo  # where to connect, asked for before each connect
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _listen_once(self) -> None:
        conn = await psycopg.AsyncConnection.connect(await self._conninfo(), autocommit=True)
        self._conn = conn
        # What psycopg reads itself (answering LISTEN or a probe) comes here.
        conn.add_notify_handler(self._notified)
        for channel in self._channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self._established_now()
        while True:
            await self._read_for(conn, LIVENESS_INTERVAL)
            await _probe(conn.execute("SELECT 1"), driver_fd(conn))

    def _notified(self, note: psycopg.Notify) -> None:
        self._wake(note.channel, note.payload)

    async def _read_for(self, conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
        """Wake on every notification for ``seconds``; raise if the connection breaks.

        A reader the loop calls as data arrives, not ``conn.notifies()``,
        whose generator hands each notification over through a waiting task
        and re-arms its wait: a loop pass or two ahead of the claim (L1).
        """
        loop = asyncio.get_running_loop()
        pgconn = conn.pgconn
        fd = pgconn.socket
        encoding = conn.info.encoding
        broken: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            notes = []
            try:
                pgconn.consume_input()
                while (note := pgconn.notifies()) is not None:
                    notes.append(note)
            except Exception as exc:  # the connection is gone (EOF, reset, ...)
                loop.remove_reader(fd)
                if not broken.done():
                    broken.set_exception(exc)
                return
            for note in notes:
                self._wake(note.relname.decode(encoding), note.extra.decode(encoding))

        loop.add_reader(fd, readable)
        try:
            readable()  # anything libpq already holds
            done, _ = await asyncio.wait({broken}, timeout=seconds)
            if done:
                broken.result()
        finally:
            loop.remove_reader(fd)
            if broken.done():
                broken.exception()  # retrieved, when a cancel came first

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # already broken: nothing to tidy
                log.debug("listener close failed", exc_info=True)


class AsyncpgListener(_ListenLoop):
    """The asyncpg listener (D1): a connection of ``store``'s engine, out of its pool."""

    def __init__(
        self,
        store: AsyncStore,
        application_name: str,
        channels: list[str],
        wake: Wake,
        on_listening: Callable[[bool], None],
        recovery: Recovery,
    ) -> None:
        super().__init__(channels, wake, on_listening, recovery)
        self._store = store
        self._application_name = application_name[:63]
        self._conn: AsyncConnection | None = None

    async def _listen_once(self) -> None:
        from ..aio import detached_connection

        self._conn, driver = await detached_connection(self._store)
        lost = asyncio.Event()
        driver.add_termination_listener(lambda _conn: lost.set())
        # The worker's own name, as the psycopg listener has it (pg_stat_activity).
        await driver.execute(
            "SELECT set_config('application_name', $1, false)", self._application_name
        )
        for channel in self._channels:
            # asyncpg quotes the channel as an identifier itself.
            await driver.add_listener(channel, self._notified)
        self._established_now()
        while True:
            try:
                await asyncio.wait_for(lost.wait(), LIVENESS_INTERVAL)
            except TimeoutError:
                await _probe(driver.execute("SELECT 1"), driver_fd(driver))
                continue
            raise ConnectionError("the LISTEN connection was closed")

    def _notified(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        self._wake(channel, payload)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()  # detached: closes the asyncpg connection itself
            except Exception:  # already broken: nothing to tidy
                log.debug("listener close failed", exc_info=True)


async def _probe(query: Awaitable[object], fd: int | None) -> None:
    """Await the liveness ``query``; past ``LIVENESS_TIMEOUT`` break socket ``fd``.

    Shutting the socket down (rather than cancelling the query, which makes
    the driver send a cancel request and wait for the reply to come anyway)
    ends the wait at once with a connection error: the listener reconnects.
    """
    task = asyncio.ensure_future(query)
    done, _ = await asyncio.wait({task}, timeout=LIVENESS_TIMEOUT)
    if not done:
        if fd is not None:
            shutdown_fd(fd)
        try:
            await asyncio.wait_for(task, LIVENESS_TIMEOUT)
        except Exception as exc:  # the broken connection's error, expected
            reraise_if_cancelled(exc)
        raise ConnectionError(f"no answer to the liveness probe within {LIVENESS_TIMEOUT:g}s")
    task.result()


async def listen_asyncpg(
    store: AsyncStore,
    application_name: str,
    channels: Sequence[str],
    wake: Wake,
    on_listening: Callable[[bool], None],
    recovery: Recovery,
) -> None:
    """The asyncpg ``Backend.listen``: an ``AsyncpgListener`` until cancelled."""
    await AsyncpgListener(
        store, application_name, list(channels), wake, on_listening, recovery
    ).run()


async def listen(
    port: QueuePort,
    application_name: str,
    channels: Sequence[str],
    wake: Wake,
    on_listening: Callable[[bool], None],
    recovery: Recovery,
) -> None:
    """``Backend.listen`` of both real backends: a ``Listener`` reading where to
    connect from ``port`` before each (re)connect, until cancelled."""
    conninfo = functools.partial(port.listen_conninfo, application_name)
    await Listener(conninfo, list(channels), wake, on_listening, recovery).run()
