"""The engines a store accepts, and the ones it makes for itself (``from_url``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import URL

from .keepalives import keepalive_connect_args
from .url import normalize_url

# The drivers the async face runs on (D1); the sync face is psycopg only.
ASYNC_DRIVERS = ("psycopg", "asyncpg")
# Before 2.0.50 SQLAlchemy's asyncpg adapter let asyncpg's InternalClientError
# (an operation cut off by a lost connection) through unwrapped and returned
# the broken connection to the pool: Q30 does not hold there.
ASYNCPG_MIN_SQLALCHEMY = (2, 0, 50)


def sqlalchemy_version() -> tuple[int, ...]:
    import sqlalchemy

    return tuple(int(part) for part in re.findall(r"\d+", sqlalchemy.__version__)[:3])


def check_engine(engine: object, expected: type, what: str) -> None:
    if not isinstance(engine, expected):
        raise TypeError(f"{what} takes a {expected.__name__}, got {type(engine).__name__}")
    dialect = engine.dialect  # type: ignore[attr-defined]
    if dialect.name != "postgresql":
        raise ValueError(f"{what} needs a PostgreSQL engine, got dialect {dialect.name!r}")
    # The store flips psycopg's own autocommit switch and the sync worker's
    # listener speaks psycopg's LISTEN API: other drivers would half-work.
    # The async face also runs on asyncpg (D1): SQLAlchemy's adapter gives
    # run_sync a sync-looking DBAPI connection, and the async worker's
    # listener has an asyncpg path of its own.
    allowed = ASYNC_DRIVERS if expected.__name__ == "AsyncEngine" else ("psycopg",)
    too_old = sqlalchemy_version() < ASYNCPG_MIN_SQLALCHEMY
    if dialect.driver == "asyncpg" and "asyncpg" in allowed and too_old:
        import sqlalchemy

        raise ValueError(
            f"{what} on asyncpg needs SQLAlchemy >= 2.0.50 (older versions pool a "
            f"connection an outage broke); found {sqlalchemy.__version__}: "
            "pip install 'alkstore-sa[asyncpg]'"
        )
    if dialect.driver not in allowed:
        if dialect.driver == "asyncpg":
            raise ValueError(
                f"{what} cannot drive asyncpg, an asyncio-only driver: use AsyncStore "
                "for a postgresql+asyncpg engine, or a postgresql+psycopg engine here"
            )
        raise ValueError(
            f"{what} needs the psycopg 3 driver (postgresql+psycopg://...)"
            + (" or asyncpg (postgresql+asyncpg://...)" if len(allowed) > 1 else "")
            + f", got {dialect.name}+{dialect.driver}"
        )


def url_for(url: str | URL) -> URL:
    return normalize_url(url, source="url")


def owned_engine_args(url: str | URL, engine_kw: Mapping[str, Any]) -> tuple[URL, dict[str, Any]]:
    """The URL and engine arguments of a store that makes (and owns) its engine.

    ``pool_pre_ping=True`` and the keepalive defaults, each unless the
    caller's arguments (or the URL) set it; asyncpg's keepalives are socket
    options, set by ``asyncpg_keepalives`` on the engine once it is made.
    """
    parsed = url_for(url)
    kw = {"pool_pre_ping": True, **engine_kw}
    kw["connect_args"] = keepalive_connect_args(parsed, kw.get("connect_args"))
    return parsed, kw
