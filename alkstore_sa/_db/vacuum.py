"""The worker's vacuum of the jobs table, when enough of it is dead (``sql/vacuum.py``)."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Connection

from .address import StoreAddress
from .sql import vacuum as vacuum_sql

# The worker's vacuum: what one look at the jobs table did.
Vacuumed = Literal["vacuumed", "not needed", "busy", "not permitted"]
# An advisory-lock class of this package's own (the first key of the pair).
VACUUM_LOCK_CLASS = 0x616C6B  # "alk"


def vacuum_jobs(
    conn: Connection, *, address: StoreAddress, min_dead: int, live_fraction: float
) -> Vacuumed:
    """VACUUM the jobs table if it holds ``min_dead + live_fraction * live`` dead versions.

    Runs on an autocommit connection (VACUUM cannot run in a transaction).
    One worker at a time per table (an advisory lock; the others answer
    ``busy``); a role that may not vacuum it answers ``not permitted``.
    """
    table = vacuum_sql.jobs_table(conn.dialect, address.schema)
    params = {"p_table": table, "p_lock_class": VACUUM_LOCK_CLASS}
    row = conn.execute(vacuum_sql.churn(), params).first()
    if row is None:
        return "not needed"  # no statistics yet (a brand-new table)
    dead, live, permitted = row
    if not permitted:
        return "not permitted"
    if dead < min_dead + live_fraction * live:
        return "not needed"
    if not conn.execute(vacuum_sql.try_lock(), params).scalar():
        return "busy"
    try:
        conn.execute(vacuum_sql.vacuum(table))
    finally:
        _vacuum_unlock(conn, params)
    return "vacuumed"


def _vacuum_unlock(conn: Connection, params: dict[str, Any]) -> None:
    """Release the vacuum's lock; a connection that cannot is dropped, which ends
    its session and so the lock (it must not go back to the pool holding it)."""
    if conn.invalidated:  # e.g. the VACUUM was cancelled: the session is gone
        return
    try:
        conn.execute(vacuum_sql.unlock(), params)
    except Exception:
        conn.invalidate()
