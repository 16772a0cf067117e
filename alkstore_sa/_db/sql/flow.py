"""Flow control's statements besides the claim (F1-F3): a queue's limits set,
cleared and read, the claim's lock, and the promotion of parked group rows.

A queue's limits live in its ``paused_queues`` row (its settings row, also
its pause: O4).  ``paused_at`` NULL means limits only; a row with neither
a pause nor a limit is deleted (the table's CHECK forbids it).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    Integer,
    Interval,
    Select,
    Text,
    and_,
    bindparam,
    delete,
    func,
    literal,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...schema import flow_rates, jobs, paused_queues
from ._common import (
    PENDING,
    id_among,
    job_ids_param,
    queue_param,
    this_queue,
    unexpired,
)
from .flow_slots import group_busy, group_ready, this_settings, wake_if

__all__ = [
    "LIMIT_COLUMNS",
    "clear_limits",
    "freed",
    "freed_groups",
    "groups_of",
    "limits_as_bound",
    "limits_of",
    "lock_settings",
    "set_limits",
]

# The settings row's limit columns, in the order every statement here reads them.
LIMIT_COLUMNS = (
    "concurrency",
    "group_concurrency",
    "rate_count",
    "rate_per",
    "group_rate_count",
    "group_rate_per",
)
_TYPES = {"rate_per": Interval, "group_rate_per": Interval}

settings = paused_queues


def _limit_params() -> dict[str, Any]:
    return {name: bindparam(f"p_{name}", type_=_TYPES.get(name, Integer)) for name in LIMIT_COLUMNS}


def limits_as_bound() -> Any:
    """``:queue`` is not paused and its limits are the bound ones (``:concurrency`` ..).

    The limited claim's guard when it is sent behind its lock without waiting
    for what the lock read (``_db/flow.py``): it runs on the limits its queue
    object saw last, and claims nothing if they are not the row's any more."""
    given = _limit_params()
    same = (settings.c[name].is_not_distinct_from(p) for name, p in given.items())
    row = select(settings.c.queue).where(this_settings())
    # No row: neither paused nor limited, which matches no limits given.
    absent = and_(~row.exists(), *(p.is_(None) for p in given.values()))
    return or_(row.where(settings.c.paused_at.is_(None), *same).exists(), absent)


def _unpark_groups() -> Any:
    """Every group-parked row of ``:queue`` back in the claim's range (rows the
    next claims will park again, if their group is still at its limit).  Expired
    rows stay parked (S3)."""
    held = select(jobs.c.id).where(
        this_queue(),
        jobs.c.status == PENDING,
        jobs.c.parked,
        jobs.c.grp.is_not(None),
        unexpired(),
    )
    return (
        update(jobs).where(id_among(held)).values(parked=False).returning(jobs.c.id).cte("unparked")
    )


@cache
def set_limits() -> Select[Any]:
    """F1: ``:queue``'s limits become the ``:concurrency`` ... ``:group_rate_per`` given
    (NULL: not limited); its pause, if any, stays.  Wakes ``:channel`` once.

    Without a group limit any more, the rows parked for their group go back
    into the claim's range at once (a changed limit leaves them: a freed
    slot or the claim's periodic promotion unparks them as slots allow).
    """
    values = _limit_params()
    upsert = pg_insert(settings).values(queue=queue_param(), paused_at=None, **values)
    upserted = (
        upsert.on_conflict_do_update(
            index_elements=[settings.c.queue],
            set_={name: upsert.excluded[name] for name in LIMIT_COLUMNS},
        )
        .returning(settings.c.queue)
        .cte("upserted")
    )
    held = select(jobs.c.id).where(
        this_queue(),
        jobs.c.status == PENDING,
        jobs.c.parked,
        jobs.c.grp.is_not(None),
        unexpired(),
        bindparam("p_group_concurrency", type_=Integer).is_(None),
    )
    unparked = update(jobs).where(id_among(held)).values(parked=False).returning(jobs.c.id)
    wake = wake_if(upserted)
    return select(func.count()).select_from(wake).add_cte(unparked.cte("unparked"))


@cache
def clear_limits() -> Select[Any]:
    """F1: ``:queue`` has no limits any more (a pause stays); its group-parked rows
    return to the claim's range and its rate history (F4) goes.  Wakes ``:channel``
    once when it had limits."""
    no_limits = {name: None for name in LIMIT_COLUMNS}
    had_limits = [settings.c[name].is_not(None) for name in LIMIT_COLUMNS]
    cleared = (
        update(settings)
        .where(this_settings(), settings.c.paused_at.is_not(None), or_(*had_limits))
        .values(**no_limits)
        .returning(settings.c.queue)
        .cte("cleared")
    )
    removed = (
        delete(settings)
        .where(this_settings(), settings.c.paused_at.is_(None))
        .returning(settings.c.queue)
        .cte("removed")
    )
    rates = (
        delete(flow_rates)
        .where(flow_rates.c.queue == queue_param())
        .returning(flow_rates.c.grp)
        .cte("rates")
    )
    changed = union_all(select(cleared.c.queue), select(removed.c.queue)).subquery("changed")
    wake = wake_if(changed)
    return select(func.count()).select_from(wake).add_cte(_unpark_groups()).add_cte(rates)


@cache
def limits_of() -> Select[Any]:
    """F1: ``:queue``'s limit columns (no row: no limits, and not paused)."""
    return select(*(settings.c[name] for name in LIMIT_COLUMNS)).where(this_settings())


@cache
def lock_settings() -> Select[Any]:
    """The limited claim's first statement: ``:queue``'s settings row, locked.

    Every limited claim of a queue takes this lock, in its own transaction,
    before the statement that counts the live claims: READ COMMITTED gives
    that next statement a snapshot taken after the lock was granted, so it
    sees every claim the previous holder committed (a count in the same
    statement as the lock wait would not).  Returns ``paused_at`` then the
    limit columns; no row: neither paused nor limited.
    """
    return (
        select(settings.c.paused_at, *(settings.c[name] for name in LIMIT_COLUMNS))
        .where(this_settings())
        .with_for_update()
    )


@cache
def has_limits() -> Select[Any]:
    """Whether ``:queue`` has limits: one primary-key read, after an empty claim."""
    return select(
        func.coalesce(
            select(or_(*(settings.c[name].is_not(None) for name in LIMIT_COLUMNS)))
            .where(this_settings())
            .scalar_subquery(),
            literal(False),
        )
    )


def _held_in(table: Any) -> tuple[Any, ...]:
    return (table.c.queue == queue_param(), table.c.status == PENDING, table.c.parked)


@cache
def freed() -> Select[Any]:
    """F3: promote parked group rows into free group slots, and wake ``:channel`` once.

    Run now and then by the limited claim (a lapse or a sweep frees slots
    with no statement of ours to follow it).  For each group with parked
    rows -- found one index descent per group in ``jobs_held_ix`` (a loose
    scan: the cost grows with the groups that have parked rows, never with
    their rows) -- the first parked rows in claim order are unparked, as
    many as its free slots (``_promote``)."""
    gconc = bindparam("p_group_concurrency", type_=Integer)
    first = jobs.alias("first")
    seed = (
        select(first.c.grp)
        .where(*_held_in(first), first.c.grp.is_not(None))
        .order_by(first.c.grp)
        .limit(literal(1, type_=Integer))
        .subquery("seed")
    )
    groups = select(seed.c.grp).cte("held_groups", recursive=True)
    after = jobs.alias("after")
    nxt = (
        select(after.c.grp)
        .where(*_held_in(after), after.c.grp > groups.c.grp)
        .order_by(after.c.grp)
        .limit(literal(1, type_=Integer))
        .scalar_subquery()
    )
    groups = groups.union_all(select(nxt).where(groups.c.grp.is_not(None)))
    return _promote(groups, gconc)


@cache
def freed_groups() -> Select[Any]:
    """``freed`` for the groups in ``:groups`` only: what follows a statement that freed
    slots on a limited queue (ack, retry, fail, cancel, release), given the groups
    of the jobs it named (``groups_of``, read before it) -- its cost grows with
    those groups, not with every group that has parked rows.  ``:groups`` empty:
    the wake alone."""
    listed = (
        func.unnest(bindparam("p_groups", type_=ARRAY(Text)))
        .table_valued("grp")
        .render_derived(name="listed")
    )
    groups = select(listed.c.grp).distinct().cte("held_groups")
    return _promote(groups, bindparam("p_group_concurrency", type_=Integer))


@cache
def groups_of() -> Select[Any]:
    """The distinct groups of the jobs in ``:job_ids`` (of ``:queue``)."""
    return (
        select(jobs.c.grp)
        .distinct()
        .where(this_queue(), jobs.c.id == func.any(job_ids_param()), jobs.c.grp.is_not(None))
    )


def _promote(groups: Any, gconc: Any) -> Select[Any]:
    """Promote the first parked rows of each of ``groups`` (a CTE of ``grp``) into its
    free slots -- ``:group_concurrency`` less its live claims and its rows already
    in the claim's range; wake ``:channel`` once."""
    busy = group_busy(groups.c.grp, groups)
    ready = group_ready(groups.c.grp, gconc, groups)
    held = jobs.alias("held")
    heads = (
        select(held.c.id)
        .where(*_held_in(held), held.c.grp == groups.c.grp, unexpired(held))
        .order_by(held.c.priority.desc(), held.c.run_at, held.c.id)
        .limit(func.greatest(literal(0, type_=Integer), gconc - busy - ready))
        # Never wait: a claim runs this holding the settings-row lock, which a
        # set_limits() holding such a row may be waiting for (a deadlock).
        .with_for_update(skip_locked=True)
        .lateral("heads")
    )
    promote = (
        select(heads.c.id).select_from(groups.join(heads, true())).where(groups.c.grp.is_not(None))
    )
    promoted = (
        update(jobs)
        .where(id_among(promote))
        .values(parked=False)
        .returning(jobs.c.id)
        .cte("promoted")
    )
    woke = select(
        func.pg_notify(bindparam("p_channel", type_=Text), literal("", type_=Text)).label("woke")
    ).cte("wake")
    return select(func.count(), select(woke.c.woke).scalar_subquery()).select_from(promoted)
