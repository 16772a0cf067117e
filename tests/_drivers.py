"""Which drivers the async face is tested on (D1), like River's one driver suite per driver.

``ALKSTORE_TEST_DRIVERS`` is a comma-separated list of ``psycopg`` and
``asyncpg`` (default ``psycopg``), or ``none`` for the sync face alone (CI's
PostgreSQL-version leg: both faces send the same statements, so the server
sees nothing new from the async one).  Each listed driver is one parametrization
of the async face: the ``qs`` fixture's ``async`` (psycopg) and ``asyncpg``
legs, and the worker tests' ``kind`` (``tests/_workers.py``).  The sync face
always runs on psycopg, the only driver a sync ``Store`` takes.

CI's asyncpg leg runs the rule tests with ``ALKSTORE_TEST_DRIVERS=asyncpg``
and ``-k asyncpg`` (the parameter id), so only the asyncpg runs repeat.
"""

from __future__ import annotations

import os

from sqlalchemy import URL

__all__ = ["ASYNC_FACES", "ENV_VAR", "async_url", "selected"]

ENV_VAR = "ALKSTORE_TEST_DRIVERS"
KNOWN = ("psycopg", "asyncpg")


def selected() -> tuple[str, ...]:
    raw = os.environ.get(ENV_VAR, "").strip() or "psycopg"
    if raw == "none":
        return ()
    drivers = tuple(d.strip() for d in raw.split(",") if d.strip())
    unknown = [d for d in drivers if d not in KNOWN]
    if unknown:
        raise ValueError(f"{ENV_VAR}: unknown driver(s) {unknown}; known: {', '.join(KNOWN)}")
    return drivers


# The async face's parameter ids: "async" is psycopg (the name the suite has
# always used), "asyncpg" the other driver.
ASYNC_FACES: list[str] = [{"psycopg": "async", "asyncpg": "asyncpg"}[d] for d in selected()]


def async_url(url: URL, face: str) -> URL:
    """``url`` for an async engine of ``face`` ("async" or "asyncpg")."""
    return url.set(drivername="postgresql+asyncpg") if face == "asyncpg" else url
