"""The claim of a queue with limits (F2, F3, F5): the claim's second statement.

It runs in a transaction whose first statement locked the queue's settings
row (``flow.lock_settings``), so it counts, on a snapshot taken after that
lock, every live claim of the queue -- other processes' included -- and no
other limited claim of the queue runs until this one commits.  The limits
come in as parameters, read under that same lock (``:concurrency``,
``:group_concurrency``; NULL for none), with ``:n`` already cut to what the
rates allow (``_db/flow.py``).  Every row source is guarded by
``flow.limits_as_bound``: when the claim is sent behind the lock without
waiting for it (one round trip), the limits bound are the ones its queue
object read last, and it claims, buries and parks nothing unless they are
still the row's and the queue is not paused.

Shape::

    lapsed_rows, exhausted   as in the unlimited claim (Q11, Q12) -- the
                             reclaim of a lapsed job counts like a first
                             claim (F5): it is a candidate like a due row
    live      the queue's processing rows whose claim deadline has not
              passed: slots in use (a lapsed claim no longer counts, F2)
    busy      live claims per group; blocked = groups at :group_concurrency
    due       pending, due, unexpired rows in claim order, not of a blocked
              group, LIMIT :n, FOR UPDATE SKIP LOCKED
    ranked    due UNION ALL lapsed, numbered in claim order overall and
              within each group
    picked    the first rows in claim order whose group still has a slot,
              at most :concurrency - live of them (and, ``bounded``, at
              most :max_bytes of payloads: ``claim.within_bytes``)
    hold      park (``parked = true``: out of ``jobs_claim_ix``'s range,
              like an expired row, S3) up to :hold_limit pending rows of the
              groups that are full once this claim is done, picked rows
              excepted -- so the next claims do not walk them (F3's cost)
    UPDATE jobs ... WHERE id = ANY(picked) RETURNING (the live columns)

``claim_concurrency`` is the same claim for the usual case, a queue whose
only limit is ``concurrency``: no groups to count, rank or park and no
rate to log, so it is the unlimited claim (``claim.claim_of``) with the
batch cut to the free slots -- half the limited claim's execution, inside
the settings row's lock (docs/benchmarks.md, FQ).
"""

from __future__ import annotations

from functools import cache

from sqlalchemy import (
    Integer,
    Update,
    bindparam,
    func,
    literal,
    select,
    union_all,
    update,
)

from ...schema import jobs
from ._common import NOW, PENDING, batch_param, id_among, this_queue, unexpired
from .claim import claim_of, claim_picked, within_bytes
from .due import candidate_keys, due_scan
from .flow import limits_as_bound
from .flow_rate import group_rate_used, log_claims, queue_rate_room
from .flow_slots import live_claim
from .lapsed import lapsed_rows, reclaimable_of

__all__ = ["HOLD_LIMIT", "claim_concurrency", "claim_limited"]

# Rows of full groups parked per claim: a few milliseconds of writes at most;
# a bigger backlog is parked over the next claims.
HOLD_LIMIT = 1000


@cache
def claim_limited(bounded: bool = False) -> Update:
    """Claim up to ``:n`` jobs of ``:queue`` within ``:concurrency`` and
    ``:group_concurrency``; RETURNING the rows (see the module's docstring).

    ``bounded``: the batch also stops once its payloads reach ``:max_bytes``,
    by the unlimited claim's rule (``claim.within_bytes``) over the rows the
    limits let through; a statement of its own, as there."""
    conc = bindparam("p_concurrency", type_=Integer)
    gconc = bindparam("p_group_concurrency", type_=Integer)
    n = batch_param()
    guard = limits_as_bound()
    live = select(jobs.c.grp).where(*live_claim(jobs)).cte("live").prefix_with("MATERIALIZED")
    busy = (
        select(live.c.grp, func.count().label("used"))
        .where(live.c.grp.is_not(None))
        .group_by(live.c.grp)
        .cte("busy")
    )
    blocked = select(busy.c.grp).where(busy.c.used >= gconc)
    due = (
        select(*candidate_keys(bounded), jobs.c.grp)
        .where(
            this_queue(),
            unexpired(),
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.run_at <= NOW,
            jobs.c.grp.is_(None) | gconc.is_(None) | jobs.c.grp.not_in(blocked),
            guard,
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(n)
        .with_for_update(skip_locked=True)
        .cte("due")
    )
    lapsed = lapsed_rows(guard)
    reclaim = reclaimable_of(lapsed, sized=bounded, grouped=True)
    both = union_all(select(due), select(reclaim)).subquery("both")
    order = (both.c.priority.desc(), both.c.run_at, both.c.id)
    rated = group_rate_used(select(both.c.grp).where(both.c.grp.is_not(None)))
    zero = literal(0, type_=Integer)
    ranked = (
        select(
            both.c.id,
            both.c.grp,
            func.row_number().over(order_by=order).label("nth"),
            func.row_number().over(partition_by=both.c.grp, order_by=order).label("in_group"),
            func.coalesce(busy.c.used, zero).label("used"),
            func.coalesce(rated.c.used, zero).label("rated"),
            *((both.c.size,) if bounded else ()),
        )
        .select_from(
            both.outerjoin(busy, busy.c.grp == both.c.grp).outerjoin(
                rated, rated.c.grp == both.c.grp
            )
        )
        .cte("ranked")
    )
    grc = bindparam("p_group_rate_count", type_=Integer)
    in_use = select(func.count()).select_from(live).scalar_subquery()
    room = func.greatest(literal(0, type_=Integer), func.coalesce(conc - in_use, n))
    fits = ranked.c.grp.is_(None) | gconc.is_(None) | (ranked.c.in_group + ranked.c.used <= gconc)
    fits_rate = ranked.c.grp.is_(None) | grc.is_(None) | (ranked.c.in_group + ranked.c.rated <= grc)
    limit = func.least(n, room, queue_rate_room(n))
    if bounded:
        fitting = select(ranked).where(fits, fits_rate).subquery("fitting")
        picked = within_bytes(fitting, (fitting.c.nth,), limit, keep=("id", "grp"), name="sized")
    else:
        picked = (
            select(ranked.c.id, ranked.c.grp)
            .where(fits, fits_rate)
            .order_by(ranked.c.nth)
            .limit(limit)
            .cte("picked")
        )
    # Groups full once this claim is done: their other pending rows are parked.
    taken = (
        select(picked.c.grp, func.count().label("took"))
        .where(picked.c.grp.is_not(None))
        .group_by(picked.c.grp)
        .subquery("taken")
    )
    full = union_all(
        select(busy.c.grp).where(busy.c.used >= gconc),
        select(taken.c.grp)
        .select_from(taken.outerjoin(busy, busy.c.grp == taken.c.grp))
        .where(taken.c.took + func.coalesce(busy.c.used, literal(0, type_=Integer)) >= gconc),
    ).subquery("full")
    to_hold = (
        select(jobs.c.id)
        .where(
            this_queue(),
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.grp.in_(select(full.c.grp)),
            jobs.c.id.not_in(select(picked.c.id)),
            guard,
        )
        # In the text, like the batch size: a LIMIT a plan cannot see is costed
        # at a tenth of the queue, which kept this claim off its generic plan.
        .limit(literal(HOLD_LIMIT, type_=Integer, literal_execute=True))
        .with_for_update(skip_locked=True)
    )
    hold = update(jobs).where(id_among(to_hold)).values(parked=True).returning(jobs.c.id)
    return claim_picked(picked, lapsed).add_cte(hold.cte("hold")).add_cte(*log_claims(picked))


@cache
def claim_concurrency(bounded: bool = False) -> Update:
    """``claim_limited`` when ``:concurrency`` is the queue's only limit (F2): at most
    ``:n`` jobs, and no more than ``:concurrency`` less the live claims."""
    guard = limits_as_bound()
    live = jobs.alias("live")
    in_use = select(func.count()).where(*live_claim(live)).scalar_subquery()
    room = func.greatest(
        literal(0, type_=Integer), bindparam("p_concurrency", type_=Integer) - in_use
    )
    return claim_of(due_scan(bounded, guard), bounded, guard, func.least(batch_param(), room))
