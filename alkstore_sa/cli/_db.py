"""Where the CLI's database comes from, and errors a person can act on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import URL, Engine, create_engine
from sqlalchemy.exc import DBAPIError

from .._db.keepalives import keepalive_connect_args
from .._db.url import ENV_VAR, describe_connect_error, normalize_url, require_psycopg
from .._values.validate import DEFAULT_SCHEMA
from ._errors import SCHEMA_VAR, CliError

__all__ = [
    "SCHEMA_VAR",
    "CliError",
    "Database",
    "export_to_environment",
    "open_engine",
    "resolve_schema",
    "resolve_url",
]

# Without it an unroutable host hangs for the kernel's TCP timeout (minutes).
CONNECT_TIMEOUT = 10


@dataclass(frozen=True)
class Database:
    """A resolved database: its URL and where the URL came from (for messages)."""

    url: URL
    source: str
    # What the user's module gets (``alkstore worker``): the URL as given when
    # it named asyncpg, which the CLI itself reaches through psycopg (D1).
    app_url: URL | None = None

    def engine(self, pool_size: int = 1, max_overflow: int = 2) -> Engine:
        """An engine with the CLI's connect timeout and the keepalive defaults
        (each unless the URL sets it).  A command needs one connection by
        default: the probe's, handed back and reused."""
        connect_args = (
            {} if "connect_timeout" in self.url.query else {"connect_timeout": CONNECT_TIMEOUT}
        )
        connect_args = keepalive_connect_args(self.url, connect_args)
        return create_engine(
            self.url, pool_size=pool_size, max_overflow=max_overflow, connect_args=connect_args
        )


def resolve_url(option: str | None, *, required: bool = True) -> Database | None:
    """``--database-url`` if given, else ``ALKSTORE_DATABASE_URL``.

    Every command takes the application's own URL, whichever of the three
    flavours it is (V3): ``postgresql://`` and ``postgresql+psycopg://`` are
    used as they are, and a ``postgresql+asyncpg://`` URL (an application
    on ``AsyncStore``, D1) is reached through psycopg 3 -- the same host,
    database and credentials -- while the user's own module (``alkstore
    worker``, ``--app``) still gets it as given.
    """
    if option is not None:
        raw, source = option, "--database-url"
    else:
        raw, source = os.environ.get(ENV_VAR, ""), ENV_VAR
    if not raw.strip():
        if not required:
            return None
        raise CliError(
            f"no database: set {ENV_VAR} (or pass --database-url) to a "
            "postgresql://user:password@host:port/dbname URL",
            code=2,
        )
    try:
        url = normalize_url(raw.strip(), source=source)
        if url.drivername == "postgresql+asyncpg":
            return Database(url.set(drivername="postgresql+psycopg"), source, app_url=url)
        return Database(require_psycopg(url, source=source, who="the alkstore command"), source)
    except ValueError as exc:  # make_url's own ValueErrors (a bad port) land here too
        message = str(exc)
        if source not in message:
            message = f"{source} is not a valid database URL: {message}"
        raise CliError(message, code=2) from None


def resolve_schema(option: str | None) -> str:
    """``--schema`` if given, else ``ALKSTORE_SCHEMA``, else ``alkstore``; validated."""
    from .._values.validate import schema_name

    name = option or os.environ.get(SCHEMA_VAR, "").strip() or DEFAULT_SCHEMA
    try:
        return schema_name(name)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None


@contextmanager
def open_engine(database: Database) -> Iterator[Engine]:
    """An engine on ``database``, probed first: an unreachable server is one line, no traceback."""
    engine = database.engine()
    try:
        try:
            engine.connect().close()
        except DBAPIError as exc:
            raise CliError(describe_connect_error(exc, source=database.source)) from None
        yield engine
    finally:
        engine.dispose()


def export_to_environment(database: Database, schema: str) -> None:
    """Make ``--database-url``/``--schema`` reach the user's module.

    ``alkstore worker`` and ``--app`` import the application's code, which
    typically builds its own Store from these variables.
    """
    url = database.app_url or database.url
    os.environ[ENV_VAR] = url.render_as_string(hide_password=False)
    os.environ[SCHEMA_VAR] = schema
