"""What fills a limit's slots (F2, F3), and the statements that read only that.

The live claims a ``concurrency`` or ``group_concurrency`` counts, a group's
rows in the claim's range, whether an enqueued row starts parked, and the
wake after a freeing statement on a queue without group limits.  Shared by
the limited claim (``flow_claim``), the promotion (``flow``) and the
enqueue (``enqueue``), so the three count one way.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Integer, Select, and_, bindparam, false, func, literal, select

from ...schema import jobs, paused_queues
from ._common import NOW, PENDING, PROCESSING, notify_once, queue_param

__all__ = [
    "group_busy",
    "group_ready",
    "live_claim",
    "parked_at_enqueue",
    "this_settings",
    "wake_if",
    "wake_if_full",
]

settings = paused_queues


def this_settings() -> Any:
    """``:queue``'s settings row (its pause and limits)."""
    return settings.c.queue == queue_param()


def wake_if(rows: Any) -> Any:
    """One NOTIFY on the queue's ``:channel`` if ``rows`` has a row."""
    return notify_once(rows, "p_channel", "wake", "woke")


def live_claim(table: Any) -> tuple[Any, ...]:
    """A row of ``:queue`` claimed and not lapsed: what a limit counts (F2, F3)."""
    return (
        table.c.queue == queue_param(),
        table.c.status == PROCESSING,
        table.c.claim_deadline > NOW,
    )


def group_busy(grp: Any, *correlated: Any) -> Any:
    """The live claims of the group ``grp`` of ``:queue``: what fills its slots."""
    live = jobs.alias("live")
    return (
        select(func.count())
        .where(*live_claim(live), live.c.grp == grp)
        .correlate(*correlated)
        .scalar_subquery()
    )


@cache
def wake_if_full() -> Select[Any]:
    """F2: wake ``:channel`` once if ``:queue`` was at its ``concurrency`` before a
    statement freed (at most) ``:freed`` slots -- what follows a freeing statement
    on a queue without group limits.  Only a full queue has a worker waiting for
    a slot (a claim that found room took it); rates alone (NULL concurrency):
    no wake, a worker held back by a rate waits for its window.  A NOTIFY
    serializes the commits that send one, so every ack sending one cost FQ's
    drain more than the limit itself."""
    conc = select(settings.c.concurrency).where(this_settings()).scalar_subquery()
    live = jobs.alias("live")
    in_use = select(func.count()).where(*live_claim(live)).scalar_subquery()
    full = select(literal(1, type_=Integer).label("full")).where(
        in_use + bindparam("p_freed", type_=Integer) >= conc
    )
    woke = wake_if(full.cte("was_full"))
    return select(func.count()).select_from(woke)


def group_ready(grp: Any, gconc: Any, *correlated: Any) -> Any:
    """The group's pending rows in the claim's range (unparked), counted up to ``gconc``
    (``jobs_group_ix``): the rows its free slots go to before any parked one."""
    ready_rows = jobs.alias("ready")
    return (
        select(func.count())
        .select_from(
            select(ready_rows.c.id)
            .where(
                ready_rows.c.queue == queue_param(),
                ready_rows.c.status == PENDING,
                ~ready_rows.c.parked,
                ready_rows.c.grp == grp,
            )
            .limit(gconc)
            .correlate(*correlated)
            .subquery()
        )
        .correlate(*correlated)
        .scalar_subquery()
    )


def parked_at_enqueue(grp: Any, nth: Any) -> Any:
    """F3: whether the ``nth`` row (1-based, claim order) an enqueue puts into the group
    ``grp`` starts parked: the queue has a ``group_concurrency``, the group has no
    row in the claim's range, and its live claims plus the rows before this one
    fill its slots -- so a burst into a full group stays out of the claim's range.
    A group with rows in range is left to the claim's parking (a row parked
    behind them could be passed over by a lower-priority one)."""
    gconc = select(settings.c.group_concurrency).where(this_settings()).scalar_subquery()
    return func.coalesce(
        and_(
            gconc.is_not(None),
            group_ready(grp, literal(1, type_=Integer)) == literal(0, type_=Integer),
            group_busy(grp) + nth - literal(1, type_=Integer) >= gconc,
        ),
        false(),
    )
