"""Flow control over a sync ``Connection`` (F1-F5): limits set and read, the
limited claim, and what a freed slot does.

How a claim knows its queue has limits, at no cost to queues without:
the unlimited claim reads ``NOT EXISTS`` of the queue's settings row (its
pause, O4), and a queue with limits has such a row -- so to the unlimited
claim a limited queue looks paused, and it hands out nothing.  When it
comes back empty, one primary-key read (``has_limits``) tells the two
apart; the queue object then remembers (``FlowState``) and its next claims
go straight to the limited form, until a lock read finds the limits gone.
The unlimited claim's statement is byte for byte what it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection

from .._values.limits import Limits, Rate
from .execute import fetch
from .sql import flow as flow_sql
from .sql import flow_claim as flow_claim_sql
from .sql import flow_rate as flow_rate_sql
from .sql import flow_slots as flow_slots_sql

if TYPE_CHECKING:
    from .address import QueueAddress

__all__ = [
    "PROMOTE_EVERY",
    "FlowState",
    "claim_rows",
    "freed",
    "freeing",
    "has_limits",
    "limits",
    "limits_from",
    "set_limits",
]

T = TypeVar("T")
Row = Sequence[Any]

# How often a queue object's limited claims also promote parked group rows
# whose slots were freed without a statement of ours (a lapse, a sweep).
PROMOTE_EVERY = 1.0


@dataclass(slots=True)
class FlowState:
    """What one queue object learned of its queue's limits (shared by its threads:
    a race only costs a claim in the other form, which reads the truth)."""

    limited: bool = False
    group_concurrency: int | None = None
    next_promote: float = 0.0
    # F4: seconds from the last claim until the queue's rate, or a held group's,
    # lets one through again, when that claim was held back by one (None: it was not).
    rate_wait: float | None = None


def set_limits(conn: Connection, *, address: QueueAddress, limits: Limits | None) -> None:
    params: dict[str, Any] = {"p_queue": address.queue, "p_channel": address.channel}
    if limits is None or limits.empty:
        fetch(conn, address, flow_sql.clear_limits(), params)
        return
    params.update(_limit_values(limits))
    fetch(conn, address, flow_sql.set_limits(), params)


def _limit_values(limits: Limits) -> dict[str, Any]:
    def per(rate: Rate | None) -> timedelta | None:
        return None if rate is None else timedelta(seconds=rate.per)

    return {
        "p_concurrency": limits.concurrency,
        "p_group_concurrency": limits.group_concurrency,
        "p_rate_count": None if limits.rate is None else limits.rate.count,
        "p_rate_per": per(limits.rate),
        "p_group_rate_count": None if limits.group_rate is None else limits.group_rate.count,
        "p_group_rate_per": per(limits.group_rate),
    }


def limits_from(row: Row) -> Limits | None:
    """F1: the settings row's limit columns as ``Limits``; None when none is set."""
    conc, gconc, rate_n, rate_per, grate_n, grate_per = row
    found = Limits(
        concurrency=conc,
        group_concurrency=gconc,
        rate=None if rate_n is None else Rate(rate_n, rate_per),
        group_rate=None if grate_n is None else Rate(grate_n, grate_per),
    )
    return None if found.empty else found


def limits(conn: Connection, *, address: QueueAddress) -> Limits | None:
    rows = fetch(conn, address, flow_sql.limits_of(), {"p_queue": address.queue})
    return limits_from(rows[0]) if rows else None


def has_limits(conn: Connection, address: QueueAddress) -> bool:
    # Unprepared like the operators' reads (``execute.fetch``): it runs only
    # after an empty claim, and prepared statements stay the hot path's.
    params = {"p_queue": address.queue}
    return bool(fetch(conn, address, flow_sql.has_limits(), params, custom_plan=True)[0][0])


def freed(
    conn: Connection,
    *,
    address: QueueAddress,
    group_concurrency: int | None,
    groups: list[str] | None = None,
) -> int:
    """Promote parked group rows into freed slots and wake the queue's workers once:
    those of ``groups`` (``[]``: the wake alone), or of every group with parked
    rows (None)."""
    params: dict[str, Any] = {
        "p_queue": address.queue,
        "p_channel": address.channel,
        "p_group_concurrency": group_concurrency,
    }
    stmt = flow_sql.freed()
    if groups is not None:
        params["p_groups"] = groups
        stmt = flow_sql.freed_groups()
    return int(fetch(conn, address, stmt, params)[0][0])


def freeing(
    conn: Connection,
    call: Callable[[Connection], T],
    *,
    address: QueueAddress,
    flow: FlowState,
    ids: list[int],
) -> T:
    """``call`` (an ack, retry, fail, cancel or release of the jobs ``ids``), then --
    when it changed anything on a queue with limits -- the promotion of parked rows
    of those jobs' groups into the slots it freed, and one wake (F3); without group
    limits, the wake alone, if the queue was full (F2).  The groups are read
    first: the call may delete the rows."""
    groups: list[str] = []
    if flow.limited and flow.group_concurrency is not None and ids:
        rows = fetch(
            conn, address, flow_sql.groups_of(), {"p_queue": address.queue, "p_job_ids": ids}
        )
        groups = [row[0] for row in rows]
    result = call(conn)
    if flow.limited and result:
        if flow.group_concurrency is None:
            params = {"p_queue": address.queue, "p_channel": address.channel, "p_freed": len(ids)}
            fetch(conn, address, flow_slots_sql.wake_if_full(), params)
        else:
            freed(conn, address=address, group_concurrency=flow.group_concurrency, groups=groups)
    return result


def claim_rows(
    conn: Connection,
    *,
    address: QueueAddress,
    worker_id: str,
    n: int,
    flow: FlowState,
    max_bytes: int | None = None,
) -> list[Row]:
    """The limited claim: lock the settings row, then claim within the limits,
    in one transaction (the caller's, with ``session=``, else one of its own)."""

    def both() -> list[Row]:
        locked = fetch(conn, address, flow_sql.lock_settings(), {"p_queue": address.queue})
        if not locked:  # neither limited nor paused any more
            flow.limited = False
            flow.group_concurrency = None
            return _claim(conn, address, worker_id, n, Limits(), max_bytes)
        paused_at, *limit_row = locked[0]
        found = limits_from(limit_row)
        flow.limited = found is not None
        flow.group_concurrency = None if found is None else found.group_concurrency
        if paused_at is not None:  # O4, F5: a paused queue claims nothing
            return []
        if found is not None and found.group_concurrency is not None:
            now = time.monotonic()
            if now >= flow.next_promote:
                flow.next_promote = now + PROMOTE_EVERY
                freed(conn, address=address, group_concurrency=found.group_concurrency)
        rows = _claim(conn, address, worker_id, n, found or Limits(), max_bytes)
        flow.rate_wait = None
        if found is not None and len(rows) < n:
            flow.rate_wait = _rate_wait(conn, address, found)
        return rows

    return in_transaction(conn, both)


def _claim(
    conn: Connection,
    address: QueueAddress,
    worker_id: str,
    n: int,
    limits: Limits,
    max_bytes: int | None,
) -> list[Row]:
    params: dict[str, Any] = {
        "p_queue": address.queue,
        "p_worker_id": worker_id,
        "p_n": n,
        "p_hold_limit": flow_claim_sql.HOLD_LIMIT,
        **_limit_values(limits),
    }
    if max_bytes is not None:
        params["p_max_bytes"] = max_bytes
    stmt = flow_claim_sql.claim_limited(bounded=max_bytes is not None)
    return fetch(conn, address, stmt, params)


def _rate_wait(conn: Connection, address: QueueAddress, limits: Limits) -> float | None:
    """F4: after a claim that got fewer than it asked for, how long until the queue's
    rate, or the earliest held group's, lets a claim through (None: no rate, or
    none is what held it back)."""
    if limits.rate is None and limits.group_rate is None:
        return None
    params = {"p_queue": address.queue, **_limit_values(limits)}
    rows = fetch(conn, address, flow_rate_sql.next_allowed(), params)
    return max(0.0, float(rows[0][0])) if rows and rows[0][0] is not None else None


def in_transaction(conn: Connection, call: Callable[[], T]) -> T:
    """``call`` inside one transaction: the caller's when there is one (``session=``),
    else one of its own on the store's connection, which runs in driver autocommit
    (``owned.in_autocommit``) and is switched out of it for the transaction."""
    dbapi: Any = conn.connection.dbapi_connection
    if dbapi is None or not dbapi.autocommit:
        return call()
    if conn.in_transaction():  # bookkeeping only: the driver was in autocommit
        conn.rollback()
    dbapi.autocommit = False
    try:
        with conn.begin():
            return call()
    finally:
        if not conn.invalidated:
            try:
                dbapi.autocommit = True
            except Exception:
                conn.invalidate()
