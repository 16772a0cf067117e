"""Helpers for the Q rule tests (docs/semantics.md): raw rows, and moving time with direct SQL.

The rule tests never sleep to let a deadline pass: they move the row's
timestamps into the past with an UPDATE, which is what the passing of time
looks like to the database.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from ._sqlspy import sync_engine_of

__all__ = [
    "dead_row",
    "db_now",
    "expire",
    "age_dead",
    "handle_core",
    "lapse",
    "live_row",
    "sql",
    "sync_engine_of",
]


def sql(engine: Engine, statement: str, **params: Any) -> list[dict[str, Any]]:
    """Run one statement in its own transaction; rows as dicts (if any)."""
    with engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return [dict(r) for r in result.mappings()] if result.returns_rows else []


def live_row(engine: Engine, job_id: int) -> Any:
    """The ``jobs`` row as a dict, or ``None``."""
    rows = sql(engine, "SELECT * FROM alkstore.jobs WHERE id = :id", id=job_id)
    return rows[0] if rows else None


def dead_row(engine: Engine, job_id: int) -> Any:
    """The ``dead_jobs`` row as a dict, or ``None``."""
    rows = sql(engine, "SELECT * FROM alkstore.dead_jobs WHERE id = :id", id=job_id)
    return rows[0] if rows else None


def db_now(engine: Engine) -> datetime:
    """The database clock, read now (not the start of any transaction)."""
    value = sql(engine, "SELECT clock_timestamp() AS t")[0]["t"]
    assert isinstance(value, datetime)
    return value


def lapse(engine: Engine, *job_ids: int, ago: float = 1.0) -> None:
    """Make these claims' deadlines pass, as if ``ago`` seconds had gone by since.

    The lapse index's ``deadline_floor`` is never above the deadline (H1), so
    time passing moves it along.
    """
    sql(
        engine,
        "UPDATE alkstore.jobs SET claim_deadline = clock_timestamp() - :ago,"
        " deadline_floor = least(deadline_floor, clock_timestamp() - :ago)"
        " WHERE id = ANY(:ids)",
        ago=timedelta(seconds=ago),
        ids=list(job_ids),
    )


def expire(engine: Engine, *job_ids: int) -> None:
    """Put these rows' ``expires_at`` one second in the past."""
    sql(
        engine,
        "UPDATE alkstore.jobs SET expires_at = clock_timestamp() - interval '1 second' "
        "WHERE id = ANY(:ids)",
        ids=list(job_ids),
    )


def age_dead(engine: Engine, job_id: int, seconds: float) -> None:
    """Make this dead row look as if it died ``seconds`` ago."""
    sql(
        engine,
        "UPDATE alkstore.dead_jobs SET died_at = clock_timestamp() - :age WHERE id = :id",
        age=timedelta(seconds=seconds),
        id=job_id,
    )


def handle_core(handle: Any) -> Any:
    """The shared ``HandleCore`` under a JobHandle, AsyncJobHandle or test SyncView."""
    return getattr(handle, "wrapped", handle)._core
