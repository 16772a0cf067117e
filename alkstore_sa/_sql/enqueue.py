"""The enqueue statement: one INSERT for any number of payloads, one NOTIFY."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    DateTime,
    Integer,
    Interval,
    LargeBinary,
    Select,
    Text,
    bindparam,
    func,
    insert,
    literal,
    select,
    true,
)

from ..schema import jobs
from ._common import NOW


class _Payload(LargeBinary):
    """``bytea`` sent as the ``bytes`` it is.

    psycopg dumps ``bytes`` as ``bytea`` by itself; LargeBinary's bind
    processor would wrap every payload of an ``enqueue_many`` in a DBAPI
    ``Binary()`` object first, a cost per payload for nothing.
    """

    cache_ok = True

    def bind_processor(self, dialect: Any) -> None:
        return None


@cache
def enqueue() -> Select[tuple[int]]:
    """Insert ``:payloads`` in order, stamped alike, and wake ``:channel`` once.

    Parameters: ``queue``, ``payloads`` (bytea[]), ``priority``,
    ``run_at`` (absolute, or NULL), ``delay`` (interval; used when ``run_at``
    is NULL), ``expires_in`` (interval or NULL), ``max_attempts``,
    ``visibility_timeout`` (interval), ``channel``.

    Every time is ``statement_timestamp()``: one clock read per enqueue
    (Q4).  The NOTIFY lives in a CTE of the same statement, so it is
    sent at commit and never for a rolled-back enqueue (Q7).  Returns
    the new ids ascending, which is input order: identity values are drawn
    in the order the ordered SELECT feeds the rows.
    """
    given = (
        func.unnest(bindparam("p_payloads", type_=ARRAY(_Payload)))
        .table_valued("payload", with_ordinality="ord")
        .render_derived()
    )
    rows = _stamped(given.c.payload).order_by(given.c.ord)
    return _insert_and_wake(rows, in_order=True)


@cache
def enqueue_one() -> Select[tuple[int]]:
    """``enqueue()`` for one ``:payload`` (bytea): the same row, the same wake.

    A plain one-row INSERT, without the array, ``unnest`` and sort the many-
    payload form needs: less to plan and run on the server and to send from
    the client, on the path of every single ``enqueue()``.
    """
    return _insert_and_wake(_stamped(bindparam("p_payload", type_=_Payload)), in_order=False)


def _stamped(payload: ColumnElement[Any]) -> Select[Any]:
    return select(
        bindparam("p_queue", type_=Text),
        payload,
        bindparam("p_priority", type_=Integer),
        func.coalesce(
            bindparam("p_run_at", type_=DateTime(timezone=True)),
            NOW + bindparam("p_delay", type_=Interval),
        ),
        bindparam("p_max_attempts", type_=Integer),
        bindparam("p_visibility_timeout", type_=Interval),
        NOW + bindparam("p_expires_in", type_=Interval),
        NOW,
    )


def _insert_and_wake(rows: Select[Any], *, in_order: bool) -> Select[tuple[int]]:
    inserted = (
        insert(jobs)
        .from_select(
            [
                "queue",
                "payload",
                "priority",
                "run_at",
                "max_attempts",
                "visibility_timeout",
                "expires_at",
                "created_at",
            ],
            rows,
        )
        .returning(jobs.c.id)
        .cte("inserted")
    )
    wake = select(
        func.pg_notify(bindparam("p_channel", type_=Text), literal("", type_=Text)).label("woke")
    ).cte("wake")
    ids = select(inserted.c.id).select_from(inserted.join(wake, true()))
    return ids.order_by(inserted.c.id) if in_order else ids
