"""``alkstore web``: serve the dashboard (W1) with uvicorn until SIGTERM/SIGINT.

Needs the ``web`` extra.  HTTP basic authentication is on when
``ALKSTORE_WEB_USER`` and ``ALKSTORE_WEB_PASSWORD`` are set (one without the
other is an error); the URL it serves is printed once it listens.
"""

from __future__ import annotations

import argparse
import socket

from sqlalchemy import create_engine

from ..store import Store
from ._db import CONNECT_TIMEOUT, CliError, Database, open_engine

__all__ = ["cmd_web"]

EXTRA_HINT = "install alkstore-sa[web] (pip install 'alkstore-sa[web]')"
POOL_SIZE = 5  # the dashboard's connections: a page or an action holds one briefly


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def cmd_web(args: argparse.Namespace, database: Database, schema: str) -> int:
    try:
        import uvicorn

        from ..web import basic_auth_from_env, create_app
    except ImportError as exc:
        raise CliError(f"alkstore web needs {exc.name}: {EXTRA_HINT}", code=2) from None
    try:
        auth = basic_auth_from_env()
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    with open_engine(database):  # fail fast, in one line, on an unreachable server
        pass
    connect_args = (
        {} if "connect_timeout" in database.url.query else {"connect_timeout": CONNECT_TIMEOUT}
    )
    engine = create_engine(
        database.url, pool_size=POOL_SIZE, max_overflow=POOL_SIZE, connect_args=connect_args
    )
    try:
        with Store(engine, schema=schema) as store:
            store.queue_names()  # fail fast, in one line, on a schema never migrated
            app = create_app(store, read_only=args.read_only, auth=auth)
            family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((args.host, args.port))
            except OSError as exc:
                sock.close()
                why = exc.strerror or str(exc)
                raise CliError(f"cannot serve on {args.host}:{args.port}: {why}", code=1) from None
            port = sock.getsockname()[1]
            config = uvicorn.Config(app, log_level="warning", access_log=False)
            server = uvicorn.Server(config)
            mode = " (read-only)" if args.read_only else ""
            login = ", HTTP basic auth" if auth is not None else ""
            print(
                f"serving the alkstore dashboard{mode}{login} at {_url(args.host, port)}",
                flush=True,
            )
            server.run(sockets=[sock])  # returns on SIGTERM/SIGINT
    finally:
        engine.dispose()
    return 0
