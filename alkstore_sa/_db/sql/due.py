"""The due rows a claim takes, in claim order, locked (Q8-Q10).

Two forms of the same scan of ``jobs_claim_ix``: one ordered scan, a loose
index scan by itself on PostgreSQL 18 and later (``due_scan``), and the
loose scan written out as a recursive walk over priority levels for
earlier servers (``due_walk``).  docs/design.md, "The claim's cost in every
backlog shape", has their EXPLAIN figures.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    CTE,
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    Text,
    bindparam,
    cast,
    func,
    literal,
    null,
    select,
    true,
    tuple_,
)

from ...schema import jobs
from ._common import NOW, PENDING, batch_param, id_among, not_paused, this_queue, unexpired

__all__ = ["SKIP_SCAN_SINCE", "candidate_keys", "due_from_walk", "due_scan", "due_walk"]

# The first PostgreSQL whose B-tree skip scan walks jobs_claim_ix one priority
# level at a time by itself (``claim``); earlier servers get ``claim_walk``.
SKIP_SCAN_SINCE = (18,)

# Above any ``integer`` priority: the walk's first step finds the highest level.
_ABOVE_ANY_PRIORITY = 2**31


def payload_size() -> ColumnElement[int]:
    """A row's payload size in bytes, for the byte-bounded claim.

    ``octet_length`` of a ``bytea`` reads the stored value's length header;
    a payload kept out of line (TOAST) is not fetched to measure it.
    """
    return func.octet_length(jobs.c.payload).label("size")


def candidate_keys(sized: bool) -> tuple[ColumnElement[Any], ...]:
    """What each candidate carries into ``picked``: its id and sort keys (and size)."""
    keys: tuple[ColumnElement[Any], ...] = (jobs.c.id, jobs.c.priority, jobs.c.run_at)
    return (*keys, payload_size()) if sized else keys


def due_walk() -> CTE:
    """Q9/Q10: the first ``:n`` due rows in claim order, locked -- one priority level at a time.

    A loose index scan of ``jobs_claim_ix`` (queue, priority DESC, parked,
    run_at, id) WHERE pending.  Each step of the recursion:

    - ``level``: the first pending row (in index order) below the previous
      level's priority -- one index descent, whatever lies in that level;
      unparked rows come first in a level, so it is parked only when the
      whole level is;
    - ``got``: that level's unparked, due, unexpired rows from that row on,
      in (run_at, id) order, up to the ``:n`` still missing, FOR UPDATE
      SKIP LOCKED.  Its scan starts at the level's first row (a row
      comparison, so it does not walk again what ``level`` walked) and
      ends at ``run_at <= now``: a level's not-yet-due rows and its parked
      rows are never read.

    The recursion stops once ``:n`` rows are held (``found``) or no level
    is left, so it costs two descents per priority level above the last
    one it needs, not a read of every row outranking the due ones.  Each
    step yields one row (the level and the array of ids it took), so what
    is taken is fixed by each step's ORDER BY ... LIMIT, not by the order
    in which PostgreSQL happens to return rows.  The seed priority is past
    any ``integer``, so the first step finds the highest level.
    """
    seed = select(
        literal(_ABOVE_ANY_PRIORITY, type_=BigInteger).label("p"),
        null().cast(ARRAY(BigInteger)).label("ids"),
        literal(0, type_=Integer).label("found"),
    ).where(not_paused())
    walk = seed.cte("walk", recursive=True)
    prev = walk.alias("prev")
    head = jobs.alias("head")
    level = (
        select(head.c.priority, head.c.run_at, head.c.id)
        .where(
            head.c.queue == bindparam("p_queue", type_=Text),
            head.c.status == PENDING,
            head.c.priority < prev.c.p,
        )
        .order_by(head.c.priority.desc(), head.c.parked, head.c.run_at, head.c.id)
        .limit(literal(1, type_=Integer))
        .lateral("level")
    )
    probe = (
        select(jobs.c.id)
        .where(
            this_queue(),
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.priority == level.c.priority,
            tuple_(jobs.c.run_at, jobs.c.id) >= tuple_(level.c.run_at, level.c.id),
            jobs.c.run_at <= NOW,
            unexpired(),
        )
        .order_by(jobs.c.run_at, jobs.c.id)
        .limit(batch_param() - prev.c.found)
        .with_for_update(skip_locked=True)
        .correlate(prev, level)
        .scalar_subquery()
    )
    # OFFSET: keeps the sub-select apart, so the probe (and its locks) runs
    # once per step, not once per reference to its array.
    got = select(func.array(probe).label("ids")).offset(literal(0, type_=Integer)).lateral("got")
    step = (
        select(
            cast(level.c.priority, BigInteger),
            got.c.ids,
            prev.c.found + func.cardinality(got.c.ids),
        )
        .select_from(prev.join(level, true()).join(got, true()))
        .where(prev.c.found < batch_param())
    )
    return walk.union_all(step)


def due_scan(sized: bool = False, guard: ColumnElement[bool] | None = None) -> Select[Any]:
    """The first ``:n`` due rows in claim order, locked: one ordered scan of ``jobs_claim_ix``.

    For PostgreSQL 18 and later, whose B-tree skip scan makes this one scan
    a loose index scan by itself: with ``queue =``, ``NOT parked`` and
    ``run_at <=`` as index conditions and ``priority`` between them
    unconstrained, the scan skips from one priority value to the next
    (EXPLAIN shows ``Index Searches``), so a level's not-yet-due rows and
    its parked rows are never read -- at one descent per
    level, cheaper than the explicit walk and planned with one relation
    less.  Before 18 the same scan reads every pending row that outranks
    the due ones (``claim_walk``).  ``guard``: the condition on the queue's
    settings row (default: not paused, O4), as ``lapsed.lapsed_rows``'s.
    """
    due = (
        select(*candidate_keys(sized))
        .where(
            this_queue(),
            unexpired(),
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.run_at <= NOW,
            not_paused() if guard is None else guard,
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(batch_param())
        .with_for_update(skip_locked=True)
        .cte("due")
    )
    return select(due)


def due_from_walk(sized: bool = False) -> Select[Any]:
    """The rows ``_due_walk`` took, with their sort keys (looked up by id)."""
    walk = due_walk()
    return select(*candidate_keys(sized)).where(id_among(select(func.unnest(walk.c.ids))))
