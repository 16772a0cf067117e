"""The dashboard's reads over one ``Connection`` (the statements are ``sql/dashboard.py``).

Each goes through ``execute.fetch`` like every other operation, planned for
its values every time (``custom_plan``, see ``execute.py``): a generic plan
would scan the whole table for any queue once a big queue made it look cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection

from .._values.job import Job, shown_row
from ..schema import DEFAULT_SCHEMA
from .address import StoreAddress
from .execute import fetch
from .sql import _common as common_sql
from .sql import dashboard as sql

__all__ = [
    "GROUP_TEXT",
    "GROUP_WINDOW",
    "MAX_ID",
    "ErrorGroup",
    "Group",
    "InFlight",
    "Minute",
    "WorkerLoad",
    "clock",
    "dead_ids",
    "dead_page",
    "error_groups",
    "in_flight",
    "pending_page",
    "throughput",
    "timeout_for_this_transaction",
    "worker_loads",
]

GROUP_TEXT = sql.GROUP_TEXT
GROUP_WINDOW = sql.GROUP_WINDOW
MAX_ID = common_sql.MAX_ID


class ErrorGroup(NamedTuple):
    """V2: dead letters of one exception type (None: not known) and folded message."""

    error_type: str | None
    error: str | None  # the folded key; None: no error text
    n: int
    last_died_at: datetime
    last_id: int
    longest: int | None  # bytes (UTF-8) of the group's longest error


class WorkerLoad(NamedTuple):
    worker_id: str | None
    queue: str
    n: int
    first_deadline: datetime
    last_deadline: datetime


class InFlight(NamedTuple):
    id: int
    queue: str
    worker_id: str | None
    attempts: int
    max_attempts: int
    claim_deadline: datetime


class Minute(NamedTuple):
    minute: datetime
    acked: int
    retried: int
    dead: int


@dataclass(frozen=True, slots=True)
class Group:
    """Which dead rows a page or an action means: one error group, or (``error`` None,
    ``typed`` False, ``any_error``) all of them.

    ``typed``: the exception type must be ``error_type`` too (None: unknown);
    otherwise any type with that folded message.
    """

    error: str | None
    error_type: str | None = None
    typed: bool = False
    any_error: bool = False


def timeout_for_this_transaction(conn: Connection, seconds: float) -> None:
    """W3: every statement of the transaction ``conn`` is in stops after ``seconds``."""
    timeout = {"p_timeout": f"{int(seconds * 1000)}ms"}
    fetch(conn, StoreAddress(DEFAULT_SCHEMA), sql.set_statement_timeout(), timeout)


def clock(conn: Connection, address: StoreAddress) -> datetime:
    [(now,)] = fetch(conn, address, common_sql.clock(), {})
    return now  # type: ignore[no-any-return]


def _jobs(rows: list[Any]) -> list[Job]:
    return [shown_row(r) for r in rows]


def error_groups(
    conn: Connection, address: StoreAddress, queue: str, limit: int
) -> list[ErrorGroup]:
    params = {"p_queue": queue, "p_limit": limit}
    rows = fetch(conn, address, sql.dead_groups(), params, custom_plan=True)
    return [ErrorGroup(*r) for r in rows]


def _group_params(group: Group) -> dict[str, Any]:
    params: dict[str, Any] = {"p_error": group.error}
    if group.typed:
        params["p_error_type"] = group.error_type
    return params


def dead_page(
    conn: Connection,
    address: StoreAddress,
    queue: str,
    group: Group,
    before: int | None,
    limit: int,
) -> list[Job]:
    """A page of one group's dead rows below ``before``, newest first."""
    stmt = sql.dead_page_of_typed_group() if group.typed else sql.dead_page_of_group()
    params = {"p_queue": queue, "p_before": before, "p_limit": limit, **_group_params(group)}
    return _jobs(fetch(conn, address, stmt, params, custom_plan=True))


def dead_ids(
    conn: Connection, address: StoreAddress, queue: str, group: Group, limit: int
) -> list[int]:
    """The oldest ``limit`` dead ids of the queue (of one group unless ``group.any_error``)."""
    params: dict[str, Any] = {"p_queue": queue, "p_limit": limit}
    if group.any_error:
        stmt = sql.dead_ids_oldest()
    else:
        stmt = sql.dead_ids_of_typed_group() if group.typed else sql.dead_ids_of_group()
        params.update(_group_params(group))
    return [r[0] for r in fetch(conn, address, stmt, params, custom_plan=True)]


def pending_page(
    conn: Connection, address: StoreAddress, queue: str, due: bool, before: int | None, limit: int
) -> list[Job]:
    stmt = sql.due_page() if due else sql.scheduled_page()
    params = {"p_queue": queue, "p_before": before, "p_limit": limit}
    return _jobs(fetch(conn, address, stmt, params, custom_plan=True))


def worker_loads(conn: Connection, address: StoreAddress, limit: int) -> list[WorkerLoad]:
    rows = fetch(conn, address, sql.in_flight_summary(), {"p_limit": limit}, custom_plan=True)
    return [WorkerLoad(*r) for r in rows]


def in_flight(conn: Connection, address: StoreAddress, limit: int) -> list[InFlight]:
    rows = fetch(conn, address, sql.in_flight(), {"p_limit": limit}, custom_plan=True)
    return [InFlight(*r) for r in rows]


def throughput(conn: Connection, address: StoreAddress, queue: str | None) -> list[Minute]:
    """The last hour's counts per minute, of ``queue`` or of every queue."""
    if queue is None:
        rows = fetch(conn, address, sql.throughput_all(), {}, custom_plan=True)
    else:
        rows = fetch(conn, address, sql.throughput_of_queue(), {"p_queue": queue}, custom_plan=True)
    return [Minute(*r) for r in rows]
