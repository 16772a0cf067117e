"""``GET /healthz`` for a worker process (B5): the standard library's HTTP server, one thread.

``alkstore worker --health-port N`` serves it.  The answer is
``worker.health()`` as a small JSON object: 200 while ``healthy`` (running,
the last database call succeeded, no handler stuck), else 503 -- before
the run starts, once it is stopping, after it ends.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..worker import WorkerHealth

__all__ = ["HEALTH_PATH", "HealthServer", "health_response", "listen_family"]

log = logging.getLogger("alkstore_sa.health")

HEALTH_PATH = "/healthz"


def health_response(health: WorkerHealth) -> tuple[int, dict[str, Any]]:
    """The status and JSON body ``/healthz`` answers for ``health``."""
    body: dict[str, Any] = {
        "healthy": health.healthy,
        "running": health.running,
        "busy": health.busy,
        "stuck": health.stuck,
        "last_claim_at": None if health.last_claim_at is None else health.last_claim_at.isoformat(),
        "listener_connected": health.listener_connected,
        "db_errors": health.db_errors,
    }
    return (200 if health.healthy else 503), body


def listen_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and address to bind ``host`` with (IPv6 literals included)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


class _Handler(BaseHTTPRequestHandler):
    read: Callable[[], Any]  # set on the subclass HealthServer makes
    respond: Callable[[Any], tuple[int, dict[str, Any]]]  # what read() gives -> the answer
    server_version = "alkstore"

    def _answer(self, head_only: bool) -> None:
        body: dict[str, Any]
        if self.path.split("?", 1)[0] != HEALTH_PATH:
            status, body = 404, {"error": f"not found; the health check is {HEALTH_PATH}"}
        else:
            try:
                status, body = self.respond(self.read())
            except Exception as exc:  # never a dropped connection: a probe reads 503
                log.warning("reading the worker's health failed", exc_info=True)
                status, body = 503, {"healthy": False, "error": str(exc)}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head_only:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(head_only=False)

    def do_HEAD(self) -> None:
        self._answer(head_only=True)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the worker's log: say nothing."""


class HealthServer:
    """Serves ``respond(read())`` at ``/healthz`` on ``host:port`` from a daemon thread.

    ``respond`` is ``health_response`` for a worker's ``health``; the X1
    supervisor gives its own (every child in one answer).

    Binding happens in the constructor (an ``OSError`` there: the port is
    taken, the host is not this machine's); ``port`` is the bound one (so
    ``port=0`` picks a free port).  ``close()`` stops it.
    """

    def __init__(
        self,
        read: Callable[[], Any],
        host: str,
        port: int,
        respond: Callable[[Any], tuple[int, dict[str, Any]]] = health_response,
    ) -> None:
        family, address = listen_family(host, port)
        handler = type(
            "HealthHandler",
            (_Handler,),
            {"read": staticmethod(read), "respond": staticmethod(respond)},
        )

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self._server = Server((address, port), handler)
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(0.1,),  # how soon close() takes effect
            name="alkstore-health",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{HEALTH_PATH}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
