"""Database URLs from the environment, with errors a person can read."""

from __future__ import annotations

import os

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "ENV_VAR",
    "database_url_from_env",
    "describe_connect_error",
    "normalize_url",
    "require_psycopg",
]

ENV_VAR = "ALKSTORE_DATABASE_URL"


def normalize_url(url: str | URL, *, source: str = ENV_VAR) -> URL:
    """Parse ``url`` and pin the psycopg 3 driver (``postgresql://`` means psycopg here).

    Raises ``ValueError`` with a one-line message naming ``source``.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ValueError(
            f"alkstore: {source} is not a valid database URL "
            "(expected postgresql+psycopg://user:password@host:port/dbname)"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if not parsed.drivername.startswith("postgresql"):
        raise ValueError(
            f"alkstore: {source} must be a PostgreSQL URL (postgresql+psycopg://...), "
            f"got driver {parsed.drivername!r}"
        )
    return parsed


def require_psycopg(url: URL, *, source: str, who: str) -> URL:
    """``url`` if it names the psycopg 3 driver, else a one-line ``ValueError``.

    For callers that open sync connections themselves (the CLI, ``migrate()``):
    ``postgresql+asyncpg`` or ``postgresql+psycopg2`` would otherwise fail
    deep inside SQLAlchemy with a missing module or a greenlet error.
    """
    if url.drivername != "postgresql+psycopg":
        # asyncpg serves AsyncStore/AsyncWorker in the application (D1), not here.
        hint = (
            " (asyncpg is for AsyncStore and AsyncWorker in your code; `alkstore worker` "
            "takes it too)"
            if url.drivername == "postgresql+asyncpg"
            else ""
        )
        raise ValueError(
            f"alkstore: {source} names the driver {url.drivername!r}, but {who} needs "
            f"psycopg 3: use a postgresql+psycopg:// URL (postgresql:// means the same){hint}"
        )
    return url


def database_url_from_env() -> URL:
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        raise SystemExit(f"alkstore: set {ENV_VAR} to a postgresql+psycopg:// database URL")
    try:
        return normalize_url(raw)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def describe_connect_error(exc: BaseException, *, source: str = ENV_VAR) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = detail[0] if detail else type(exc).__name__
    return f"alkstore: cannot connect to the database in {source}: {first}"
