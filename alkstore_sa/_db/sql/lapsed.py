"""Lapsed claims, as the claim and the sweep see them (Q11, Q12, Q25).

The claim reads this queue's lapsed range of ``jobs_lapse_ix`` once
(``lapsed_rows``, materialized) and shares it between the burial of the
exhausted ones (``bury_exhausted_of``) and the reclaim of the others
(``reclaimable_of``); each locks its rows by id and re-checks them.
"""

from __future__ import annotations

from sqlalchemy import CTE, ColumnElement, Select, Text, literal, select

from ...schema import jobs
from ._common import (
    MAX_ATTEMPTS_ERROR,
    NOW,
    PENDING,
    PROCESSING,
    batch_param,
    id_among,
    lapsed,
    move_to_dead,
    not_paused,
    this_queue,
    unexpired,
)
from .due import candidate_keys

__all__ = [
    "LAPSED_EXHAUSTED_ERROR",
    "bury_exhausted_of",
    "bury_lapsed_exhausted",
    "lapsed_rows",
    "reclaimable_of",
]

LAPSED_EXHAUSTED_ERROR = MAX_ATTEMPTS_ERROR


def bury_lapsed_exhausted(name: str = "exhausted") -> CTE:
    """The sweep's burial (Q25): this queue's lapsed claims with no attempts left, to dead.

    Paused or not (O4): the claim's own burial (``bury_exhausted_of``) is
    the one that waits out a pause, through ``lapsed_rows``.
    """
    locked_ids: Select[tuple[int]] = (
        select(jobs.c.id)
        .where(
            this_queue(),
            jobs.c.status == PROCESSING,
            *lapsed(),
            jobs.c.attempts >= jobs.c.max_attempts,
        )
        .with_for_update(skip_locked=True)
    )
    return move_to_dead(locked_ids, literal(LAPSED_EXHAUSTED_ERROR, type_=Text), name)


def lapsed_rows(guard: ColumnElement[bool] | None = None) -> CTE:
    """This queue's processing rows past their deadline: ONE scan of ``jobs_lapse_ix``.

    Unlocked and materialized (the burial and the reclaim both read it), so
    the lapse index -- and, under a long transaction, every dead entry in
    its lapsed range -- is walked once per claim, not twice.  Each consumer
    then locks its rows by primary key and re-checks them (a row another
    claim took meanwhile no longer matches and is skipped).  ``guard``: the
    condition on the queue's settings row (default: not paused, O4; the
    limited claim's: not paused and the limits it was given, F5).
    """
    return (
        select(
            jobs.c.id,
            jobs.c.priority,
            jobs.c.run_at,
            jobs.c.attempts,
            jobs.c.max_attempts,
            jobs.c.expires_at,
        )
        .where(
            this_queue(),
            jobs.c.status == PROCESSING,
            *lapsed(),
            not_paused() if guard is None else guard,
        )
        .cte("lapsed_rows")
        .prefix_with("MATERIALIZED")
    )


def still_lapsed() -> tuple[ColumnElement[bool], ...]:
    """The lapse re-checked on a row of ``lapsed_rows`` once it is locked.

    ``status <> 'pending'`` is ``status = 'processing'`` (the status CHECK
    allows only the two) in a form the planner cannot match to
    ``jobs_lapse_ix``'s predicate: the row is then found by its id, as
    meant, instead of by a second scan of the lapse index (which the
    planner prefers when its statistics say the index is nearly empty,
    and which is what this design avoids).
    """
    return (jobs.c.status != PENDING, jobs.c.claim_deadline <= NOW)


def bury_exhausted_of(lapsed_rows: CTE) -> CTE:
    """Q12 in the claim: the exhausted ones among ``lapsed_rows``, locked and buried."""
    locked_ids: Select[tuple[int]] = (
        select(jobs.c.id)
        .where(
            id_among(
                select(lapsed_rows.c.id).where(lapsed_rows.c.attempts >= lapsed_rows.c.max_attempts)
            ),
            *still_lapsed(),
            jobs.c.attempts >= jobs.c.max_attempts,
        )
        .with_for_update(skip_locked=True)
    )
    return move_to_dead(locked_ids, literal(LAPSED_EXHAUSTED_ERROR, type_=Text), "exhausted")


def reclaimable_of(lapsed_rows: CTE, sized: bool = False, grouped: bool = False) -> CTE:
    """Q11: the first ``:n`` lapsed rows with attempts left, in claim order, locked.

    ``grouped``: each with its group too (the limited claim, F3)."""
    keys = (*candidate_keys(sized), jobs.c.grp) if grouped else candidate_keys(sized)
    return (
        select(*keys)
        .where(
            id_among(
                select(lapsed_rows.c.id).where(
                    lapsed_rows.c.attempts < lapsed_rows.c.max_attempts,
                    unexpired(lapsed_rows),
                )
            ),
            *still_lapsed(),
            jobs.c.attempts < jobs.c.max_attempts,
            unexpired(),
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(batch_param())
        .with_for_update(skip_locked=True)
        .cte("lapsed")
    )
