"""Rates (F4) as the limited claim reads and writes them: ``flow_rates`` holds, per
queue (``grp = ''``) and per (queue, group), the times of the claims inside the
rate's window (older ones are dropped at each write, so a row holds at most
``count`` times).

A claim at ``now`` may take ``count - (times in (now - per, now])`` jobs:
every window of ``per`` seconds that holds the new claims lies within
``(now - per, now]`` as far as earlier claims go, so none holds more than
``count``.  All of it runs under the limited claim's lock on the settings
row, so the read and the write of a row are never interleaved with another
claim's.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    CTE,
    DateTime,
    Integer,
    Interval,
    Select,
    Text,
    bindparam,
    cast,
    exists,
    func,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from ...schema import flow_rates, jobs
from ._common import NOW, PENDING, queue_param, this_queue

__all__ = ["group_rate_used", "log_claims", "next_allowed", "queue_rate_room"]

_QUEUE_ROW = ""  # the grp of a queue's own row
_TZ = DateTime(timezone=True)


def _rate(prefix: str) -> tuple[Any, Any]:
    return (
        bindparam(f"p_{prefix}rate_count", type_=Integer),
        # Cast: a NULL (no rate) would otherwise make ``now - :per`` timestamp - timestamp.
        cast(bindparam(f"p_{prefix}rate_per", type_=Interval), Interval),
    )


def _in_window(per: Any, now: Any = NOW) -> tuple[Any, Any]:
    """The unnested claim times of ``flow_rates`` rows, and those inside the window
    that ends at ``now``."""
    times = func.unnest(flow_rates.c.claimed).table_valued("at").render_derived(name="t")
    return times, times.c.at > now - per


def queue_rate_room(n: Any) -> Any:
    """How many jobs ``:rate_count``/``:rate_per`` let this claim take (``n`` without a rate)."""
    count, per = _rate("")
    times, inside = _in_window(per)
    used = (
        select(func.count())
        .select_from(flow_rates.join(times, literal(True)))
        .where(flow_rates.c.queue == queue_param(), flow_rates.c.grp == _QUEUE_ROW, inside)
        .scalar_subquery()
    )
    # greatest() skips NULLs, so "no rate" must be told apart before it.
    return func.greatest(literal(0, type_=Integer), func.coalesce(count - used, n))


def group_rate_used(groups: Select[Any]) -> CTE:
    """``(grp, used)``: claims inside ``:group_rate_per`` of each group in ``groups``."""
    _, per = _rate("group_")
    times, inside = _in_window(per)
    return (
        select(flow_rates.c.grp, func.count().label("used"))
        .select_from(flow_rates.join(times, literal(True)))
        .where(flow_rates.c.queue == queue_param(), flow_rates.c.grp.in_(groups), inside)
        .group_by(flow_rates.c.grp)
        .cte("rated")
    )


def _log(picked: CTE, prefix: str, name: str) -> CTE:
    """Append this claim's times to the queue's (or each group's) row, dropping the
    times the window has left behind."""
    count, per = _rate(prefix)
    if prefix:
        rows = (
            select(
                queue_param(),
                picked.c.grp,
                func.array_agg(NOW),
            )
            .where(picked.c.grp.is_not(None), count.is_not(None))
            .group_by(picked.c.grp)
        )
    else:
        rows = select(
            queue_param(),
            literal(_QUEUE_ROW, type_=Text),
            func.array(select(NOW).select_from(picked).scalar_subquery()),
        ).where(count.is_not(None), exists(select(picked.c.id)))
    insert = pg_insert(flow_rates).from_select(["queue", "grp", "claimed"], rows)
    merged = (
        func.unnest(flow_rates.c.claimed.op("||", return_type=ARRAY(_TZ))(insert.excluded.claimed))
        .table_valued("at")
        .render_derived(name="m")
    )
    recent = select(merged.c.at).where(merged.c.at > NOW - per).scalar_subquery()
    return (
        insert.on_conflict_do_update(
            index_elements=[flow_rates.c.queue, flow_rates.c.grp],
            set_={"claimed": func.array(recent)},
        )
        .returning(flow_rates.c.grp)
        .cte(name)
    )


def log_claims(picked: CTE) -> tuple[CTE, CTE]:
    """The queue's and the groups' rate rows, written for this claim's ``picked`` rows."""
    return _log(picked, "", "rate_log"), _log(picked, "group_", "group_rate_log")


def next_allowed() -> Select[Any]:
    """Seconds until a claim of ``:queue`` held back by a rate may get a job again:
    the queue's rate, or the earliest of the group rates of the groups that have
    pending rows -- run in the claim's transaction after it (NULL: no rate was
    full, so no rate is what held the claim back).

    Whether a window was full is judged at the transaction's start, which is
    before the claim's statement: a window full when the claim ran is full then
    too (the times only leave it), so a claim held back by a rate always
    gets a wait -- 0 or less if the window has moved on since, never NULL,
    which would leave a worker to its re-poll.  The wait itself is counted
    from now.  A group's wait is when its oldest time in the window leaves
    it: early, never late, if a lowered count left more times than it in the
    window (the claim then woken finds the window still full and waits again).
    """
    count, per = _rate("")
    began = func.transaction_timestamp(type_=DateTime(timezone=True))
    times, inside = _in_window(per, began)
    in_window = (
        select(times.c.at)
        .select_from(flow_rates.join(times, literal(True)))
        .where(flow_rates.c.queue == queue_param(), flow_rates.c.grp == _QUEUE_ROW, inside)
        .order_by(times.c.at.desc())
        .limit(count)
        .subquery("w")
    )
    queue_wait = (
        select(func.extract("epoch", func.min(in_window.c.at) + per - NOW))
        .having(func.count() >= count)
        .scalar_subquery()
    )
    return select(func.least(queue_wait, _group_wait(began)))


def _group_wait(began: Any) -> Any:
    """The earliest reopening of a full group window among the groups with due,
    unparked pending rows (``jobs_group_ix``), in seconds from now."""
    gcount, gper = _rate("group_")
    times, inside = _in_window(gper, began)
    full = (
        select(flow_rates.c.grp, func.min(times.c.at).label("oldest"))
        .select_from(flow_rates.join(times, literal(True)))
        .where(
            gcount.is_not(None),
            flow_rates.c.queue == queue_param(),
            flow_rates.c.grp != _QUEUE_ROW,
            inside,
        )
        .group_by(flow_rates.c.grp)
        .having(func.count() >= gcount)
        .subquery("full_groups")
    )
    waiting = exists(
        select(jobs.c.id).where(
            this_queue(),
            jobs.c.grp == full.c.grp,
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.run_at <= NOW,
        )
    )
    return (
        select(func.extract("epoch", func.min(full.c.oldest) + gper - NOW))
        .where(waiting)
        .scalar_subquery()
    )
