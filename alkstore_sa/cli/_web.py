"""``alkstore web``: serve the dashboard (W1) with uvicorn until SIGTERM/SIGINT.

Needs the ``web`` extra.  HTTP basic authentication is on when
``ALKSTORE_WEB_USER`` and ``ALKSTORE_WEB_PASSWORD`` are set (one without the
other is an error); the URL it serves is printed once it listens.  Without
them it serves only a loopback ``--host`` (and answers only loopback Host
headers); another address needs credentials, or ``--insecure-no-auth`` to
open it to anyone who reaches it (issue 24).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
from types import FrameType
from typing import Any

from ..store import Store
from ._db import CliError, Database, open_engine

__all__ = ["cmd_web"]

EXTRA_HINT = "install alkstore-sa[web] (pip install 'alkstore-sa[web]')"
POOL_SIZE = 5  # the dashboard's connections: a page or an action holds one briefly


NO_AUTH_REFUSED = (
    "web: --host {host} is not a loopback address and no login is set: "
    "set ALKSTORE_WEB_USER and ALKSTORE_WEB_PASSWORD, or pass --insecure-no-auth"
)
NO_AUTH_WARNING = (
    "alkstore: web: WARNING: serving {host} with no login (--insecure-no-auth): "
    "anyone who reaches it can pause, requeue, purge and cancel"
)


def _anyone(request: Any) -> bool:
    """``--insecure-no-auth``: every request, addressed to any host, is let in."""
    return True


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _server_class(uvicorn: Any) -> Any:
    class Server(uvicorn.Server):  # type: ignore[misc]
        """uvicorn's server without its signal capture: it re-raises the signal after a
        graceful shutdown (exit status -15); ``alkstore web`` exits 0, like ``metrics``."""

        def capture_signals(self) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()

    return Server


def _serve_until_signal(server: Any, sock: socket.socket) -> None:
    """Serve until SIGTERM/SIGINT, then shut down gracefully (open requests finish)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def cmd_web(args: argparse.Namespace, database: Database, schema: str) -> int:
    try:
        import uvicorn

        from ..web import basic_auth_from_env, create_app
        from ..web._security import is_loopback_host
    except ImportError as exc:
        raise CliError(f"alkstore web needs {exc.name}: {EXTRA_HINT}", code=2) from None
    try:
        auth = basic_auth_from_env()
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    with open_engine(database):  # fail fast, in one line, on an unreachable server
        pass
    engine = database.engine(pool_size=POOL_SIZE, max_overflow=POOL_SIZE)
    try:
        with Store(engine, schema=schema) as store:
            store.queue_names()  # fail fast, in one line, on a schema never migrated
            family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((args.host, args.port))
                sock.listen(128)  # so a client of the printed URL waits rather than being refused
            except OSError as exc:
                sock.close()
                why = exc.strerror or str(exc)
                raise CliError(f"cannot serve on {args.host}:{args.port}: {why}", code=1) from None
            app_auth: Any = auth
            if auth is None and not is_loopback_host(args.host):
                if not args.insecure_no_auth:
                    sock.close()
                    raise CliError(NO_AUTH_REFUSED.format(host=args.host), code=2)
                print(NO_AUTH_WARNING.format(host=args.host), file=sys.stderr, flush=True)
                app_auth = _anyone
            app = create_app(store, read_only=args.read_only, auth=app_auth)
            port = sock.getsockname()[1]
            config = uvicorn.Config(app, log_level="warning", access_log=False)
            server = _server_class(uvicorn)(config)
            notes = [
                n for n, on in (("read-only", args.read_only), ("HTTP basic auth", auth)) if on
            ]
            shown = f" ({', '.join(notes)})" if notes else ""
            url = _url(args.host, port)
            print(f"serving the alkstore dashboard at {url}{shown}", flush=True)
            _serve_until_signal(server, sock)
    finally:
        engine.dispose()
    return 0
