"""The claim: one round trip that buries exhausted lapsed rows and hands out jobs.

Shape (Q8-Q12, O4)::

    WITH exhausted_moved AS (DELETE lapsed rows with no attempts left RETURNING *),
         exhausted AS (INSERT INTO dead_jobs SELECT ... FROM exhausted_moved),
         due       AS (SELECT pending, due, unexpired rows ORDER BY priority DESC,
                       run_at, id LIMIT :n FOR UPDATE SKIP LOCKED),
         lapsed    AS (SELECT processing rows past their deadline with attempts
                       left, same order, LIMIT :n FOR UPDATE SKIP LOCKED),
         picked    AS (the first :n of due UNION ALL lapsed, same order)
    UPDATE jobs SET status='processing', attempts=attempts+1, worker_id=:worker_id,
                    claim_deadline=now+visibility_timeout
    WHERE jobs.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING jobs.*

Every row source also requires ``NOT EXISTS (the queue in paused_queues)``:
a one-time filter PostgreSQL evaluates once per statement (a primary-key
lookup), so a paused queue's claim returns nothing and buries nothing, and
sees a pause committed before the statement started (O4).

Rows another transaction holds are skipped, never waited for.  Pending rows
are found through a partial index walked in claim order (stopping at the
LIMIT), lapsed ones through a partial index on their deadline (few, and
sorted), so neither a backlog of dead rows nor of future jobs slows it.
"""

from __future__ import annotations

from functools import cache

from sqlalchemy import (
    CTE,
    ColumnElement,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    literal,
    or_,
    select,
    union_all,
    update,
)

from ..schema import jobs, paused_queues
from ._common import MAX_ATTEMPTS_ERROR, NOW, id_among, move_to_dead

__all__ = ["LAPSED_EXHAUSTED_ERROR", "bury_lapsed_exhausted", "claim", "not_paused"]

LAPSED_EXHAUSTED_ERROR = MAX_ATTEMPTS_ERROR


def _this_queue() -> ColumnElement[bool]:
    return jobs.c.queue == bindparam("p_queue", type_=Text)


def not_paused() -> ColumnElement[bool]:
    """O4: this queue has no row in ``paused_queues`` (uncorrelated: a one-time filter)."""
    return ~(
        select(paused_queues.c.queue)
        .where(paused_queues.c.queue == bindparam("p_queue", type_=Text))
        .exists()
    )


def bury_lapsed_exhausted(name: str = "exhausted", *, unless_paused: bool = False) -> CTE:
    """Move this queue's lapsed claims with no attempts left to dead (Q12).

    The claim's burial waits while the queue is paused (``unless_paused``);
    the sweep's does not (O4).
    """
    paused = (not_paused(),) if unless_paused else ()
    locked_ids: Select[tuple[int]] = (
        select(jobs.c.id)
        .where(
            _this_queue(),
            jobs.c.status == "processing",
            jobs.c.claim_deadline <= NOW,
            jobs.c.attempts >= jobs.c.max_attempts,
            *paused,
        )
        .with_for_update(skip_locked=True)
    )
    return move_to_dead(locked_ids, literal(LAPSED_EXHAUSTED_ERROR, type_=Text), name)


def _candidates(*where: ColumnElement[bool], name: str) -> CTE:
    return (
        select(jobs.c.id, jobs.c.priority, jobs.c.run_at)
        .where(
            _this_queue(),
            or_(jobs.c.expires_at.is_(None), jobs.c.expires_at > NOW),
            *where,
            not_paused(),
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(bindparam("p_n", type_=Integer))
        .with_for_update(skip_locked=True)
        .cte(name)
    )


@cache
def claim() -> Update:
    """Claim up to ``:n`` jobs of ``:queue`` for ``:worker_id``; RETURNING the rows."""
    due = _candidates(jobs.c.status == "pending", jobs.c.run_at <= NOW, name="due")
    lapsed = _candidates(
        jobs.c.status == "processing",
        jobs.c.claim_deadline <= NOW,
        jobs.c.attempts < jobs.c.max_attempts,
        name="lapsed",
    )
    both = union_all(select(due), select(lapsed)).subquery("both")
    picked = (
        select(both.c.id)
        .order_by(both.c.priority.desc(), both.c.run_at, both.c.id)
        .limit(bindparam("p_n", type_=Integer))
        .cte("picked")
    )
    return (
        update(jobs)
        .where(id_among(select(picked.c.id)))
        .values(
            status="processing",
            attempts=jobs.c.attempts + 1,
            worker_id=bindparam("p_worker_id", type_=Text),
            claim_deadline=NOW + jobs.c.visibility_timeout,
        )
        .returning(*jobs.c)
        .add_cte(bury_lapsed_exhausted(unless_paused=True))
    )
