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
from .execute import fetch, fetch_in_one_go
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
    # The limits the last lock read, which the next claim sends without
    # waiting for its own lock read (None: not read yet, or none).
    limits: Limits | None = None
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
    return int(fetch(conn, address, *_freed_call(address, group_concurrency, groups))[0][0])


def _freed_call(
    address: QueueAddress, group_concurrency: int | None, groups: list[str] | None
) -> tuple[Any, dict[str, Any]]:
    params: dict[str, Any] = {
        "p_queue": address.queue,
        "p_channel": address.channel,
        "p_group_concurrency": group_concurrency,
    }
    if groups is None:
        return flow_sql.freed(), params
    params["p_groups"] = groups
    return flow_sql.freed_groups(), params


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
    in one transaction (the caller's, with ``session=``, else one of its own).

    On the store's own psycopg connection, once a lock read has told the
    queue object its limits, the lock, the claim and the COMMIT go in one
    round trip (``fetch_in_one_go``): the claim runs on the limits seen
    last, guarded to claim nothing unless they are still the row's
    (``flow_sql.limits_as_bound``), so the lock is held for three statements'
    work and never across a round trip (FQ, docs/flow-control.md).  When the
    lock read shows other limits, or a pause, the claim is made again the
    two-step way."""
    if flow.limits is not None:
        rows = _claim_in_one_go(conn, address, worker_id, n, flow, max_bytes)
        if rows is not None:
            return rows

    def both() -> list[Row]:
        locked = fetch(conn, address, flow_sql.lock_settings(), {"p_queue": address.queue})
        if not locked:  # neither limited nor paused any more
            _learn(flow, None)
            return _claim(conn, address, worker_id, n, Limits(), max_bytes)
        paused_at, *limit_row = locked[0]
        found = _learn(flow, limit_row)
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


def _learn(flow: FlowState, limit_row: Sequence[Any] | None) -> Limits | None:
    """What a lock read of the settings row (None: no row) tells the queue object."""
    found = None if limit_row is None else limits_from(limit_row)
    flow.limited = found is not None
    flow.group_concurrency = None if found is None else found.group_concurrency
    flow.limits = found
    return found


def _claim_in_one_go(
    conn: Connection,
    address: QueueAddress,
    worker_id: str,
    n: int,
    flow: FlowState,
    max_bytes: int | None,
) -> list[Row] | None:
    """The lock, a due promotion, the claim on ``flow.limits`` and the COMMIT in one
    round trip; None when the connection cannot, or the limits were not the row's."""
    assumed = flow.limits
    assert assumed is not None
    calls = [(flow_sql.lock_settings(), {"p_queue": address.queue})]
    promote = assumed.group_concurrency is not None and time.monotonic() >= flow.next_promote
    if promote:
        calls.append(_freed_call(address, assumed.group_concurrency, None))
    calls.append(_claim_call(address, worker_id, n, assumed, max_bytes))
    rated = assumed.rate is not None or assumed.group_rate is not None
    if rated:  # F4: right behind the claim, as the two-step claim reads it
        calls.append(_next_allowed_call(address, assumed))
    # The general limited claim is planned anew on every run unless told
    # (~1 ms inside the lock); the short one settles on its generic plan itself.
    generic = not _concurrency_only(assumed)
    results = fetch_in_one_go(conn, address, calls, generic_plans=generic)
    if results is None:
        return None
    if promote:
        flow.next_promote = time.monotonic() + PROMOTE_EVERY
    locked, rows = results[0], results[-2 if rated else -1]
    paused_at = locked[0][0] if locked else None
    found = _learn(flow, locked[0][1:] if locked else None)
    if not rows and (paused_at is not None or found != assumed):
        # The guard kept this claim empty: a paused queue claims nothing (F5);
        # on other limits, or none, the claim is made again on what the lock read.
        # (Rows claimed are always handed out: the guard let them through.)
        return [] if paused_at is not None else None
    flow.rate_wait = _rate_wait_of(results[-1]) if rated and len(rows) < n else None
    return rows


def _claim(
    conn: Connection,
    address: QueueAddress,
    worker_id: str,
    n: int,
    limits: Limits,
    max_bytes: int | None,
) -> list[Row]:
    return fetch(conn, address, *_claim_call(address, worker_id, n, limits, max_bytes))


def _claim_call(
    address: QueueAddress, worker_id: str, n: int, limits: Limits, max_bytes: int | None
) -> tuple[Any, dict[str, Any]]:
    params: dict[str, Any] = {
        "p_queue": address.queue,
        "p_worker_id": worker_id,
        "p_n": n,
        **_limit_values(limits),
    }
    bounded = max_bytes is not None
    if bounded:
        params["p_max_bytes"] = max_bytes
    if _concurrency_only(limits):
        return flow_claim_sql.claim_concurrency(bounded), params  # the usual case, shorter
    return flow_claim_sql.claim_limited(bounded), params


def _concurrency_only(limits: Limits) -> bool:
    return limits.concurrency is not None and (
        limits.group_concurrency is None and limits.rate is None and limits.group_rate is None
    )


def _rate_wait(conn: Connection, address: QueueAddress, limits: Limits) -> float | None:
    """F4: after a claim that got fewer than it asked for, how long until the queue's
    rate, or the earliest held group's, lets a claim through (None: no rate, or
    none is what held it back)."""
    if limits.rate is None and limits.group_rate is None:
        return None
    return _rate_wait_of(fetch(conn, address, *_next_allowed_call(address, limits)))


def _next_allowed_call(address: QueueAddress, limits: Limits) -> tuple[Any, dict[str, Any]]:
    return flow_rate_sql.next_allowed(), {"p_queue": address.queue, **_limit_values(limits)}


def _rate_wait_of(rows: Sequence[Row]) -> float | None:
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
