"""The claim: one round trip that buries exhausted lapsed rows and hands out jobs.

Shape (Q8-Q12, O4)::

    WITH RECURSIVE
      lapsed_rows AS MATERIALIZED (this queue's processing rows past their
                       deadline: ONE scan of jobs_lapse_ix, unlocked),
      exhausted_moved AS (DELETE the exhausted ones among lapsed_rows, locked
                       by id with SKIP LOCKED and re-checked, RETURNING *),
      exhausted AS (INSERT INTO dead_jobs SELECT ... FROM exhausted_moved),
      due       AS (pending, unparked, due, unexpired rows in claim order, LIMIT :n,
                    FOR UPDATE SKIP LOCKED: one ordered scan (``claim``) or
                    a walk over priority levels (``claim_walk``)),
      lapsed    AS (the first :n of lapsed_rows with attempts left, by id,
                    re-checked, ORDER BY priority DESC, run_at, id, SKIP LOCKED),
      picked    AS (the first :n of due UNION ALL lapsed, same order)
    UPDATE jobs SET status='processing', attempts=attempts+1, worker_id=:worker_id,
                    claim_deadline=deadline_floor=now+visibility_timeout
    WHERE jobs.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING (the live columns)

Both row sources (lapsed_rows and the due rows) also require ``NOT EXISTS
(the queue in paused_queues)``: a one-time filter PostgreSQL evaluates once
per statement (a primary-key lookup), so a paused queue's claim returns
nothing and buries nothing, and sees a pause committed before the statement
started (O4).

Rows another transaction holds are skipped, never waited for.  What the
claim reads does not grow with the rows that are not claimable now, with
one exception at the end (docs/design.md "The claim's cost in every
backlog shape" has the EXPLAIN figures and the designs rejected):

- not-yet-due rows that outrank the due ones: ``jobs_claim_ix`` (queue,
  priority DESC, parked, run_at, id) WHERE pending is read as a loose index scan,
  one priority level at a time, stopping at the LIMIT.  PostgreSQL 18's
  B-tree skip scan does that by itself for the single ordered scan
  (``claim``: 125 buffers, 0.18 ms per claim at 1M such rows, as on an
  empty queue); before 18 that scan read every such row (1,481 buffers,
  10 ms at 300k on 15), so ``claim_walk`` writes the loose scan out as a
  recursive CTE (34 buffers, 0.1 ms).  The walk is not used on 18: it
  costs ~0.1 ms more planning per claim, on every claim.
- rows held by live claims: not in ``jobs_claim_ix``, and past ``now`` in
  ``jobs_lapse_ix`` -- except claims that heartbeats kept alive past their
  first deadline: the lapse index keys on ``deadline_floor``, which a
  heartbeat does not raise (so that heartbeats are HOT updates), and
  each such claim is read once per claim statement and re-checked against
  its ``claim_deadline``.  That is bounded by the jobs in flight, not by the
  backlog;
- the lapsed range of ``jobs_lapse_ix``: scanned once, shared by the burial
  and the reclaim (twice before), so the dead entries a long-open
  transaction keeps there are read once per claim;
- expired rows awaiting a sweep that outrank the due ones: due by
  ``run_at``, only the row's ``expires_at`` rules them out, so until
  parked each is read on the heap by every claim.  Claims park them
  (``park``, at most every second per queue object, ``_park.py``): a parked
  row is still pending and expired for every reader, but it lies after
  its level's unparked rows in ``jobs_claim_ix`` and the scans take only
  ``NOT parked`` rows (an index condition), so no claim reads it again.

Not flat: under a transaction held open, the dead entries every claimed
job leaves at the head of its level in ``jobs_claim_ix``, where the
claim's scan starts.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    BigInteger,
    ColumnElement,
    FromClause,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    func,
    literal,
    or_,
    select,
    union_all,
    update,
)

from ...schema import jobs
from ._common import LIVE, NOW, PENDING, PROCESSING, batch_param, id_among, this_queue
from .due import SKIP_SCAN_SINCE, due_from_walk, due_scan
from .lapsed import LAPSED_EXHAUSTED_ERROR, bury_exhausted_of, lapsed_rows, reclaimable_of

__all__ = [
    "LAPSED_EXHAUSTED_ERROR",
    "SKIP_SCAN_SINCE",
    "claim",
    "claim_bounded",
    "claim_of",
    "claim_picked",
    "claim_walk",
    "claim_walk_bounded",
    "park",
    "within_bytes",
]


def claim_of(
    due: Select[Any],
    sized: bool = False,
    guard: ColumnElement[bool] | None = None,
    limit: ColumnElement[Any] | None = None,
) -> Update:
    """The claim of ``due`` and the lapsed rows: at most ``limit`` (default ``:n``) of
    them in claim order.  ``guard``: the settings-row condition of the lapsed rows'
    scan (default: not paused); the limited claim's (F2) passes its own."""
    lapsed = lapsed_rows(guard)
    both = union_all(due, select(reclaimable_of(lapsed, sized))).subquery("both")
    order = (both.c.priority.desc(), both.c.run_at, both.c.id)
    cap = batch_param() if limit is None else limit
    if sized:
        picked = within_bytes(both, order, cap)
    else:
        picked = select(both.c.id).order_by(*order).limit(cap).cte("picked")
    return claim_picked(picked, lapsed)


def claim_picked(picked: CTE, lapsed: CTE) -> Update:
    """The claim of the ``picked`` ids (Q8, Q11), lapsed rows at their last attempt
    buried in the same statement (Q12): the unlimited and the limited claim's end."""
    return (
        update(jobs)
        .where(id_among(select(picked.c.id)))
        .values(
            status=PROCESSING,
            attempts=jobs.c.attempts + 1,
            worker_id=bindparam("p_worker_id", type_=Text),
            claim_deadline=NOW + jobs.c.visibility_timeout,
            deadline_floor=NOW + jobs.c.visibility_timeout,
        )
        .returning(*LIVE)
        .add_cte(bury_exhausted_of(lapsed))
    )


def within_bytes(
    rows: FromClause,
    order: tuple[ColumnElement[Any], ...],
    limit: ColumnElement[Any],
    keep: tuple[str, ...] = ("id",),
    name: str = "ranked",
) -> CTE:
    """``picked`` under a byte bound: the longest prefix, in claim order, of the first
    ``limit`` candidates whose payloads (``size``) add up to at most ``:max_bytes``
    -- and at least the first one, so a job bigger than the bound is still
    claimed, alone.  The rule of both claims, unlimited and limited (F1-F5):
    ``rows`` are the candidates each may take, ``keep`` the columns ``picked``
    carries on.

    The candidates are the same rows, in the same order, as the unbounded
    claim's: the bound only cuts the batch short (the rows locked and left
    out are free again when the statement ends, as the unbounded claim's
    surplus candidates are).  ``order`` is unique, so the running sum's
    frame is exactly the rows before and at each one.
    """
    ranked = (
        select(
            *(rows.c[k] for k in keep),
            func.row_number().over(order_by=order).label("nth"),
            func.sum(rows.c.size).over(order_by=order, rows=(None, 0)).label("running"),
        )
        .order_by(*order)
        .limit(limit)
        .cte(name)
    )
    return (
        select(*(ranked.c[k] for k in keep))
        .where(
            or_(
                ranked.c.nth == literal(1, type_=BigInteger),
                ranked.c.running <= bindparam("p_max_bytes", type_=BigInteger),
            )
        )
        .cte("picked")
    )


@cache
def claim() -> Update:
    """Claim up to ``:n`` jobs of ``:queue`` for ``:worker_id``; RETURNING the rows.

    For PostgreSQL 18 and later (``_due_scan``); ``claim_walk`` is the same
    claim for earlier versions.
    """
    return claim_of(due_scan())


@cache
def claim_walk() -> Update:
    """``claim`` with the due rows found by ``_due_walk``: flat before PostgreSQL 18 too."""
    return claim_of(due_from_walk())


@cache
def park() -> Update:
    """Set aside up to ``:limit`` of ``:queue``'s expired pending rows; RETURNING ids.

    A parked row keeps its status, its expiry and every field a caller
    reads: it is still pending, still counted expired, and still moved to
    dead by ``sweep_expired()`` (Q25).  Only ``parked`` changes, which moves
    it past its level's claimable rows in ``jobs_claim_ix``, where the
    claims' scans (``NOT parked``) do not go: claims stop reading it
    (until parked, each claim reads every expired row that outranks the due
    ones, on the heap, to see its ``expires_at``).
    Found through ``jobs_park_ix``, which holds only unparked expired
    candidates, so a park with nothing to do is one index descent.  Rows
    another transaction holds are skipped: the next park takes them.
    """
    candidates = (
        select(jobs.c.id)
        .where(
            this_queue(),
            jobs.c.status == PENDING,
            ~jobs.c.parked,
            jobs.c.expires_at.is_not(None),
            jobs.c.expires_at <= NOW,
        )
        .order_by(jobs.c.expires_at)
        .limit(bindparam("p_limit", type_=Integer))
        .with_for_update(skip_locked=True)
    )
    return update(jobs).where(id_among(candidates)).values(parked=True).returning(jobs.c.id)


@cache
def claim_bounded() -> Update:
    """``claim`` that stops once the batch's payloads reach ``:max_bytes``.

    A statement of its own, not a clause of ``claim``: a claim without a
    bound runs exactly the statement (and plan) it always did.
    """
    return claim_of(due_scan(sized=True), sized=True)


@cache
def claim_walk_bounded() -> Update:
    """``claim_walk`` under a byte bound (``claim_bounded``)."""
    return claim_of(due_from_walk(sized=True), sized=True)
