"""A fault-injecting TCP proxy between the chaos clients and the test PostgreSQL.

Our own, small, asyncio: it runs on a loop of its own in a daemon thread,
listens on 127.0.0.1 and opens one upstream connection (TCP, or the
server's unix socket) per client.  It forwards bytes as they come, and
reads the PostgreSQL protocol on both sides just enough to know, per
connection:

- which SQL texts the client sent (``Query``, ``Parse``; a ``Bind`` of a
  prepared statement is mapped back to its ``Parse``), so a test can pick
  "the connection that issued LISTEN" or "a connection sending a claim";
- what is in flight: the last statement sent and not yet answered by a
  ``ReadyForQuery``, so a cut can be told to be "during a COMMIT": the
  COMMIT reached the server, its reply did not reach the client, and the
  client cannot know whether it committed.

Faults: ``latency`` (each chunk waits that long before it is forwarded),
``cut`` (close both sides of one connection at a random byte of its next
traffic), ``cut_next_commit`` (forward the next COMMIT seen, then close
both sides before the reply), and blackholes (stop forwarding, no reset,
sockets kept open) of one connection, of the connections matching a
predicate, of the next connection that sends a matching statement (after
forwarding it: the server runs it, the reply never comes), or of all.

The proxy answers an ``SSLRequest``/``GSSENCRequest`` itself with ``N`` so
both streams stay plain PostgreSQL messages (clients on the default
``sslmode=prefer`` go on without TLS).  Every cut is recorded (``cuts``)
with the client's port, the time (``time.time()``) and what was in flight,
so a test can attribute a rerun to a cut on the connection that ran it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import URL

T = TypeVar("T")

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CHUNK = 65536


@dataclass
class Cut:
    conn_id: int
    client_port: int
    at: float  # time.time() of the cut
    in_flight: str | None  # the statement sent and not answered yet, if any
    during_commit: bool  # that statement was a COMMIT: the client cannot know
    reason: str  # "random" | "commit"
    statements: tuple[str, ...] = ()  # the SQL texts its connection had sent

    def saw(self, needle: str) -> bool:
        return any(needle in s for s in self.statements)


class _Parser:
    """Frames one direction's byte stream into (end offset in chunk, type, body)."""

    def __init__(self, startup: bool) -> None:
        self.startup = startup  # frontend: untyped messages until the StartupMessage
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[int, bytes, bytes]]:
        out: list[tuple[int, bytes, bytes]] = []
        base = len(self.buf)  # bytes of buf that came from earlier chunks
        self.buf += data
        pos = 0
        while True:
            if self.startup:
                if len(self.buf) - pos < 8:
                    break
                (length,) = struct.unpack_from("!i", self.buf, pos)
                if len(self.buf) - pos < length:
                    break
                (code,) = struct.unpack_from("!i", self.buf, pos + 4)
                kind = b"ssl" if code in (SSL_REQUEST, GSSENC_REQUEST) else b"startup"
                if kind == b"startup":
                    self.startup = False
                pos += length
                out.append((pos - base, kind, b""))
                continue
            if len(self.buf) - pos < 5:
                break
            (length,) = struct.unpack_from("!i", self.buf, pos + 1)
            if len(self.buf) - pos < 1 + length:
                break
            kind = self.buf[pos : pos + 1]
            body = bytes(self.buf[pos + 5 : pos + 1 + length])
            pos += 1 + length
            out.append((pos - base, kind, body))
        self.buf = self.buf[pos:]
        return out


def _cstr(body: bytes, start: int = 0) -> tuple[str, int]:
    end = body.index(b"\0", start)
    return body[start:end].decode("utf-8", "replace"), end + 1


def is_commit(sql: str | None) -> bool:
    return sql is not None and sql.strip().rstrip(";").strip().upper() in ("COMMIT", "END")


@dataclass(eq=False)
class Conn:
    id: int
    client_port: int
    client_w: asyncio.StreamWriter
    server_w: asyncio.StreamWriter
    statements: list[str] = field(default_factory=list)  # distinct SQL texts, in order seen
    prepared: dict[str, str] = field(default_factory=dict)
    pending: str | None = None  # the statement of the Parse/Bind being built
    in_flight: str | None = None
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    cut_after: int | None = None  # bytes still forwarded before a random cut
    closed: bool = False
    commits: int = 0  # COMMITs forwarded
    hole_for: float | None = None  # how long a triggered blackhole holds it
    holed_at: float | None = None  # time.time() it was (last) blackholed
    rows_held: int = 0  # result rows read from the server while blackholed
    notes_held: int = 0  # NOTIFY messages (``A``) read from the server while blackholed
    hole_armed: float | None = None  # a matched statement's blackhole, due at its end

    def saw(self, needle: str) -> bool:
        return any(needle in s for s in self.statements)


class Proxy:
    """Start with ``Proxy(upstream_host, upstream_port).start()``; ``close()`` at the end."""

    def __init__(self, host: str, port: int, *, seed: int = 1) -> None:
        self._up_host = host
        self._up_port = port
        self.rng = random.Random(seed)
        self.latency = 0.0
        self.conns: dict[int, Conn] = {}
        self.cuts: list[Cut] = []
        self.blackholed: list[Conn] = []  # every connection ever blackholed, in order
        self.connections_made = 0
        self.history: list[Conn] = []  # every connection, open or closed
        self._next_id = 0
        self._commit_cuts = 0  # COMMITs still to be cut right after forwarding
        self._blackhole_next: list[tuple[Callable[[str], bool], float]] = []
        self._all_flowing: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="proxy")
        self.port = 0

    # -- lifecycle, from the test's thread -------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        self._call(self._start())
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def url(self, base: URL) -> URL:
        """``base`` pointed at the proxy (TCP on 127.0.0.1)."""
        query = {k: v for k, v in base.query.items() if k not in ("host", "port")}
        return base.set(host="127.0.0.1", port=self.port, query=query)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _soon(self, fn: Callable[[], None]) -> None:
        asyncio.run_coroutine_threadsafe(self._run(fn), self._loop).result(10)

    @staticmethod
    async def _run(fn: Callable[[], None]) -> None:
        fn()

    # -- faults, from the test's thread ----------------------------------------------------

    def snapshot(self) -> list[Conn]:
        return [c for c in list(self.conns.values()) if not c.closed]

    def cut(self, conn: Conn | None = None, *, within: int = 2000) -> Conn | None:
        """Cut ``conn`` (else a random open one) at a random byte of its next traffic."""

        def arm() -> None:
            nonlocal conn
            if conn is None:
                live = [c for c in self.conns.values() if not c.closed]
                conn = self.rng.choice(live) if live else None
            if conn is not None and conn.cut_after is None:
                conn.cut_after = self.rng.randrange(within)
                if conn.in_flight is not None and self.rng.random() < 0.5:
                    # Half the time cut at once: mid-wait for a reply (the
                    # client has sent it all; the answer never arrives).
                    self._cut(conn, "random")

        self._soon(arm)
        return conn

    def cut_next_commit(self, n: int = 1) -> None:
        """Forward the next ``n`` COMMITs (any connection), each cut before its reply."""

        def arm() -> None:
            self._commit_cuts += n

        self._soon(arm)

    def blackhole(self, match: Callable[[Conn], bool]) -> list[Conn]:
        """Stop forwarding on every open connection ``match`` picks (sockets stay open)."""
        picked: list[Conn] = []

        def go() -> None:
            for conn in self.conns.values():
                if not conn.closed and match(conn):
                    self._hole(conn)
                    picked.append(conn)

        self._soon(go)
        return picked

    def blackhole_next(self, match: Callable[[str], bool], *, for_s: float = 3600) -> None:
        """Blackhole the next connection that sends a statement ``match`` accepts.

        The statement is forwarded (the server runs it); its reply, and
        everything after it both ways, is held.
        """

        def arm() -> None:
            self._blackhole_next.append((match, for_s))

        self._soon(arm)

    def blackhole_all(self, seconds: float) -> None:
        def go() -> None:
            assert self._all_flowing is not None
            self._all_flowing.clear()
            self._loop.call_later(seconds, self._all_flowing.set)

        self._soon(go)

    def heal(self) -> None:
        """Forward again on every blackholed connection (still open ones)."""

        def go() -> None:
            assert self._all_flowing is not None
            self._all_flowing.set()
            for conn in self.conns.values():
                conn.flowing.set()

        self._soon(go)

    # -- the loop's side --------------------------------------------------------------------

    async def _start(self) -> None:
        self._all_flowing = asyncio.Event()
        self._all_flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns.values()):
            self._close(conn)

    def _hole(self, conn: Conn, seconds: float | None = None) -> None:
        conn.flowing.clear()
        conn.holed_at = time.time()
        self.blackholed.append(conn)
        if seconds is not None:
            self._loop.call_later(seconds, conn.flowing.set)

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._up_host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self._up_host}/.s.PGSQL.{self._up_port}")
        return await asyncio.open_connection(self._up_host, self._up_port)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await self._open_upstream()
        except OSError:
            client_w.close()
            return
        self._next_id += 1
        self.connections_made += 1
        conn = Conn(self._next_id, client_w.get_extra_info("peername")[1], client_w, server_w)
        conn.flowing.set()
        self.conns[conn.id] = conn
        self.history.append(conn)
        try:
            await asyncio.gather(
                self._pump(conn, client_r, server_w, frontend=True),
                self._pump(conn, server_r, client_w, frontend=False),
            )
        finally:
            self._close(conn)
            self.conns.pop(conn.id, None)

    def _close(self, conn: Conn) -> None:
        conn.closed = True
        conn.flowing.set()  # wake a pump held by a blackhole, so it sees the close
        for w in (conn.client_w, conn.server_w):
            with contextlib.suppress(Exception):
                w.close()

    def _cut(self, conn: Conn, reason: str) -> None:
        if conn.closed:
            return
        self.cuts.append(
            Cut(
                conn.id,
                conn.client_port,
                time.time(),
                conn.in_flight,
                is_commit(conn.in_flight),
                reason,
                tuple(conn.statements),
            )
        )
        self._close(conn)

    def _note(self, conn: Conn, kind: bytes, body: bytes) -> str | None:
        """Read one frontend message; the statement it sends, if it sends one."""
        if kind == b"Q":
            sql, _ = _cstr(body)
            self._saw(conn, sql)
            return sql
        if kind == b"P":
            name, at = _cstr(body)
            sql, _ = _cstr(body, at)
            self._saw(conn, sql)
            if name:
                conn.prepared[name] = sql
            conn.pending = sql
        elif kind == b"B":
            _, at = _cstr(body)
            name, _ = _cstr(body, at)
            if name:
                conn.pending = conn.prepared.get(name, conn.pending)
        elif kind in (b"E", b"S") and conn.pending is not None:
            sql, conn.pending = conn.pending, None
            return sql
        return None

    @staticmethod
    def _saw(conn: Conn, sql: str) -> None:
        if sql not in conn.statements and len(conn.statements) < 500:
            conn.statements.append(sql)

    async def _pump(
        self,
        conn: Conn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        frontend: bool,
    ) -> None:
        parser = _Parser(startup=frontend)
        assert self._all_flowing is not None
        try:
            while not conn.closed:
                data = await reader.read(CHUNK)
                if not data or conn.closed:
                    break
                stop_at: int | None = None  # forward up to here, then cut
                reason = "commit"
                hole_at: int | None = None  # forward up to here, then blackhole
                reply = b""
                skip: list[tuple[int, int]] = []  # byte ranges answered here, not forwarded
                prev = 0
                for end, kind, body in parser.feed(data):
                    if frontend:
                        if kind == b"ssl":
                            reply += b"N"
                            skip.append((prev, end))
                        sql = self._note(conn, kind, body)
                        if sql is not None:
                            conn.in_flight = sql
                            if is_commit(sql):
                                conn.commits += 1
                                if self._commit_cuts > 0 and stop_at is None:
                                    self._commit_cuts -= 1
                                    stop_at = end
                            for i, (match, hold) in enumerate(self._blackhole_next):
                                if match(sql):
                                    del self._blackhole_next[i]
                                    conn.hole_armed = hold
                                    break
                        # Held after the message that ends the statement (a
                        # simple Query, or the Sync after an Execute): the
                        # server runs and commits it, the reply never arrives.
                        if kind in (b"Q", b"S") and conn.hole_armed is not None:
                            if hole_at is None:
                                hole_at, conn.hole_for = end, conn.hole_armed
                            conn.hole_armed = None
                    elif kind == b"Z":
                        conn.in_flight = None
                    elif kind == b"D" and not conn.flowing.is_set():
                        conn.rows_held += 1  # a result row the client never got
                    elif kind == b"A" and not conn.flowing.is_set():
                        conn.notes_held += 1  # a notification the client never got
                    prev = end
                if skip:
                    kept, at = b"", 0
                    for a, b in skip:
                        kept += data[at:a]
                        at = b
                    data = kept + data[at:]
                    conn.client_w.write(reply)
                if conn.cut_after is not None and (stop_at is None or conn.cut_after < stop_at):
                    if conn.cut_after < len(data):
                        stop_at, reason = conn.cut_after, "random"
                    else:
                        conn.cut_after -= len(data)
                if self.latency:
                    await asyncio.sleep(self.latency)
                if hole_at is not None and (stop_at is None or hole_at < stop_at):
                    # Held first: the reply may be read before the drain returns.
                    self._hole(conn, conn.hole_for)
                    writer.write(data[:hole_at])
                    await writer.drain()
                    data = data[hole_at:]
                    if stop_at is not None:
                        stop_at -= hole_at
                while not (conn.flowing.is_set() and self._all_flowing.is_set()):
                    await conn.flowing.wait()
                    await self._all_flowing.wait()
                if conn.closed:
                    break
                if stop_at is not None:
                    writer.write(data[:stop_at])
                    with contextlib.suppress(Exception):
                        await writer.drain()
                    self._cut(conn, reason)
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._close(conn)
