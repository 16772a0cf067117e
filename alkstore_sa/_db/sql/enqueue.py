"""The enqueue statement: one INSERT for any number of payloads, one NOTIFY.

Each comes in two variants: the plain one, and a ``_traced`` one that also
stores ``:trace_context`` (B3's carrier, jsonb) in every row it inserts.  An
enqueue uses the traced variant only when an observer filled a carrier, so
an untraced enqueue sends exactly the statement it always sent.

Jobs with a unique key (U1) go through their own ``_keyed`` variants, so an
enqueue without one sends exactly the statement it always sent too: the
same INSERT plus the key, ``ON CONFLICT DO NOTHING`` against the partial
unique index ``jobs_queue_unique_key_ix``, returning ``(id, unique_key)`` of
the rows it did insert.  A key that was live is simply not in the result;
``live_keys()`` then finds its job (see ``_db/enqueue.enqueue_keyed``).
"""

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
    any_,
    bindparam,
    func,
    insert,
    literal,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...schema import jobs
from ._common import NOW, PENDING, wake_once_if_any
from .flow_slots import parked_at_enqueue


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
    return _many(traced=False)


@cache
def enqueue_traced() -> Select[tuple[int]]:
    """``enqueue()`` storing ``:trace_context`` (jsonb) in every row (B3)."""
    return _many(traced=True)


def _many(*, traced: bool, kept: bool = False, grouped: bool = False) -> Select[tuple[int]]:
    given = (
        func.unnest(bindparam("p_payloads", type_=ARRAY(_Payload)))
        .table_valued("payload", with_ordinality="ord")
        .render_derived()
    )
    rows = _stamped(
        given.c.payload, traced=traced, kept=kept, grouped=grouped, nth=given.c.ord
    ).order_by(given.c.ord)
    return _insert_and_wake(rows, in_order=True, traced=traced, kept=kept, grouped=grouped)


@cache
def enqueue_keyed() -> Select[Any]:
    """``enqueue()`` with a key per payload (U1): ``:unique_keys`` (text[], NULL for none).

    ``:payloads`` and ``:unique_keys`` are parallel arrays; the keys given
    must be distinct (the caller collapses repeats).  A row whose key is
    live in ``:queue`` is skipped (``ON CONFLICT DO NOTHING``: a key another
    transaction is inserting makes this one wait for it to commit or roll
    back).  Returns ``(id, unique_key)`` of the inserted rows, ids ascending
    in input order, and wakes ``:channel`` only when it inserted any.
    """
    return _many_keyed(traced=False)


@cache
def enqueue_keyed_traced() -> Select[Any]:
    """``enqueue_keyed()`` storing ``:trace_context`` (jsonb) in every row (B3)."""
    return _many_keyed(traced=True)


def _many_keyed(
    *, traced: bool, kept: bool = False, grouped: bool = False, replace: bool = False
) -> Select[Any]:
    given = (
        func.unnest(
            bindparam("p_payloads", type_=ARRAY(_Payload)),
            bindparam("p_unique_keys", type_=ARRAY(Text)),
        )
        .table_valued("payload", "unique_key", with_ordinality="ord")
        .render_derived()
    )
    g = given.c
    stamped = _stamped(
        g.payload, traced=traced, key=g.unique_key, kept=kept, grouped=grouped, nth=g.ord
    )
    rows = stamped.order_by(g.ord)
    return _insert_keyed_and_wake(
        rows, in_order=True, traced=traced, kept=kept, grouped=grouped, replace=replace
    )


@cache
def enqueue_one_keyed() -> Select[Any]:
    """``enqueue_keyed()`` for one ``:payload`` with one ``:unique_key``: no array, no sort."""
    return _one_keyed(traced=False)


@cache
def enqueue_one_keyed_traced() -> Select[Any]:
    """``enqueue_one_keyed()`` storing ``:trace_context`` (jsonb) in the row (B3)."""
    return _one_keyed(traced=True)


def _one_keyed(
    *, traced: bool, kept: bool = False, grouped: bool = False, replace: bool = False
) -> Select[Any]:
    row = _stamped(
        bindparam("p_payload", type_=_Payload),
        traced=traced,
        key=bindparam("p_unique_key", type_=Text),
        kept=kept,
        grouped=grouped,
    )
    return _insert_keyed_and_wake(
        row, in_order=False, traced=traced, kept=kept, grouped=grouped, replace=replace
    )


@cache
def live_keys() -> Select[Any]:
    """U1: ``(unique_key, id)`` of the live jobs of ``:queue`` holding ``:unique_keys``.

    Run as a statement of its own after a keyed insert skipped some keys: in
    READ COMMITTED it reads a snapshot taken after the insert, so it sees
    the job the insert collided with even when another transaction
    committed it while the insert waited (a snapshot older than the wait,
    such as a CTE of the insert's own statement would read, could not).
    Found through ``jobs_queue_unique_key_ix``.
    """
    return select(jobs.c.unique_key, jobs.c.id).where(
        jobs.c.queue == bindparam("p_queue", type_=Text),
        jobs.c.unique_key == any_(bindparam("p_unique_keys", type_=ARRAY(Text))),
    )


@cache
def enqueue_one() -> Select[tuple[int]]:
    """``enqueue()`` for one ``:payload`` (bytea): the same row, the same wake.

    A plain one-row INSERT, without the array, ``unnest`` and sort the many-
    payload form needs: less to plan and run on the server and to send from
    the client, on the path of every single ``enqueue()``.
    """
    return _one(traced=False)


@cache
def enqueue_one_traced() -> Select[tuple[int]]:
    """``enqueue_one()`` storing ``:trace_context`` (jsonb) in the row (B3)."""
    return _one(traced=True)


def _one(*, traced: bool, kept: bool = False, grouped: bool = False) -> Select[tuple[int]]:
    row = _stamped(
        bindparam("p_payload", type_=_Payload), traced=traced, kept=kept, grouped=grouped
    )
    return _insert_and_wake(row, in_order=False, traced=traced, kept=kept, grouped=grouped)


_VARIANTS: dict[tuple[bool, ...], Select[Any]] = {}


def enqueue_kept(*, one: bool, keyed: bool, traced: bool) -> Select[Any]:
    """R1: the enqueue of that shape storing ``:keep_completed`` (interval) in every row."""
    return enqueue_variant(one=one, keyed=keyed, traced=traced, kept=True)


def enqueue_variant(
    *,
    one: bool,
    keyed: bool,
    traced: bool,
    kept: bool = False,
    grouped: bool = False,
    replace: bool = False,
) -> Select[Any]:
    """The enqueue of that shape, with the columns only some enqueues set.

    ``kept``: stores ``:keep_completed`` (R1).  ``grouped``: stores ``:group``
    (F3) in every row.  ``replace`` (keyed only, U2): a key whose live job is
    pending replaces that job's payload, priority, run_at and group and
    returns its id.  Their own variants, so an enqueue without them sends
    exactly the statement it always sent.  Built once per shape (a dict, as
    the shapes are arguments: each is pinned in the builder tests).
    """
    shape = (one, keyed, traced, kept, grouped, replace)
    stmt = _VARIANTS.get(shape)
    if stmt is None:
        if keyed:
            build = _one_keyed if one else _many_keyed
            stmt = build(traced=traced, kept=kept, grouped=grouped, replace=replace)
        else:
            stmt = (_one if one else _many)(traced=traced, kept=kept, grouped=grouped)
        _VARIANTS[shape] = stmt
    return stmt


# The columns every enqueue fills, in the order ``_stamped`` selects them.
_COLUMNS = (
    "queue",
    "payload",
    "priority",
    "run_at",
    "max_attempts",
    "visibility_timeout",
    "expires_at",
    "created_at",
)


def _stamped(
    payload: ColumnElement[Any],
    *,
    traced: bool,
    key: ColumnElement[Any] | None = None,
    kept: bool = False,
    grouped: bool = False,
    nth: ColumnElement[Any] | None = None,
) -> Select[Any]:
    # nth: each row's place in the enqueue (1-based): a grouped row may start parked (F3).
    stamps = select(
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
    if traced:
        stamps = stamps.add_columns(bindparam("p_trace_context", type_=JSONB))
    if kept:
        stamps = stamps.add_columns(bindparam("p_keep_completed", type_=Interval))
    if grouped:
        group = bindparam("p_group", type_=Text)
        first = literal(1, type_=Integer)
        stamps = stamps.add_columns(group, parked_at_enqueue(group, first if nth is None else nth))
    if key is not None:
        stamps = stamps.add_columns(key)
    return stamps


def _columns(*, traced: bool, kept: bool, grouped: bool = False) -> list[str]:
    """``_COLUMNS`` plus the optional ones, in the order ``_stamped`` selects them."""
    return [
        *_COLUMNS,
        *(["trace_context"] if traced else []),
        *(["keep_completed"] if kept else []),
        *(["grp", "parked"] if grouped else []),
    ]


def _insert_and_wake(
    rows: Select[Any], *, in_order: bool, traced: bool, kept: bool = False, grouped: bool = False
) -> Select[tuple[int]]:
    columns = _columns(traced=traced, kept=kept, grouped=grouped)
    inserted = insert(jobs).from_select(columns, rows).returning(jobs.c.id).cte("inserted")
    wake = select(
        func.pg_notify(bindparam("p_channel", type_=Text), literal("", type_=Text)).label("woke")
    ).cte("wake")
    ids = select(inserted.c.id).select_from(inserted.join(wake, true()))
    return ids.order_by(inserted.c.id) if in_order else ids


def _insert_keyed_and_wake(
    rows: Select[Any],
    *,
    in_order: bool,
    traced: bool,
    kept: bool = False,
    grouped: bool = False,
    replace: bool = False,
) -> Select[Any]:
    columns = _columns(traced=traced, kept=kept, grouped=grouped)
    insert_rows = pg_insert(jobs).from_select([*columns, "unique_key"], rows)
    elements = [jobs.c.queue, jobs.c.unique_key]
    keyed_only = jobs.c.unique_key.is_not(None)
    if replace:
        # U2: a pending live job takes the new values (the last write wins);
        # a processing one is left alone, and its id found by live_keys().
        new = insert_rows.excluded
        upsert = insert_rows.on_conflict_do_update(
            index_elements=elements,
            index_where=keyed_only,
            set_={
                "payload": new.payload,
                "priority": new.priority,
                "run_at": new.run_at,
                "grp": new.grp,
            },
            where=jobs.c.status == PENDING,
        )
    else:
        upsert = insert_rows.on_conflict_do_nothing(index_elements=elements, index_where=keyed_only)
    inserted = upsert.returning(jobs.c.id, jobs.c.unique_key).cte("inserted")
    # One notification when a row went in; none when every key was live
    # (nothing new to claim, and Q7's rolled-back-wakes-no-one still holds).
    wake = wake_once_if_any(inserted)
    rows_out = select(inserted.c.id, inserted.c.unique_key).select_from(inserted.join(wake, true()))
    return rows_out.order_by(inserted.c.id) if in_order else rows_out
