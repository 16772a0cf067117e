"""The claim: one round trip that buries exhausted lapsed rows and hands out jobs.

Shape (Q8-Q12, O4)::

    WITH RECURSIVE
      lapsed_rows AS MATERIALIZED (this queue's processing rows past their
                       deadline: ONE scan of jobs_lapse_ix, unlocked),
      exhausted_moved AS (DELETE the exhausted ones among lapsed_rows, locked
                       by id with SKIP LOCKED and re-checked, RETURNING *),
      exhausted AS (INSERT INTO dead_jobs SELECT ... FROM exhausted_moved),
      due       AS (pending, due, unexpired rows in claim order, LIMIT :n,
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
  priority DESC, claim_at, id) WHERE pending is read as a loose index scan,
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
  heartbeat does not raise (so that heartbeats are HOT updates, H1), and
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
  row is still pending and expired for every reader, but its ``claim_at``
  (the index's time key: ``run_at``, or +infinity once parked) puts it past
  the due range.  The scans order by ``claim_at``, which is ``run_at`` for
  every row they may take.

Not flat: under a transaction held open, the dead entries every claimed
job leaves at the head of its level in ``jobs_claim_ix``, where the
claim's scan starts.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    CTE,
    BigInteger,
    ColumnElement,
    FromClause,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    cast,
    func,
    literal,
    null,
    or_,
    select,
    true,
    tuple_,
    union_all,
    update,
)

from ...schema import jobs, paused_queues
from ._common import LIVE, MAX_ATTEMPTS_ERROR, NOW, id_among, lapsed, move_to_dead

__all__ = [
    "LAPSED_EXHAUSTED_ERROR",
    "SKIP_SCAN_SINCE",
    "bury_lapsed_exhausted",
    "claim",
    "claim_bounded",
    "claim_walk",
    "claim_walk_bounded",
    "not_paused",
    "park",
]

LAPSED_EXHAUSTED_ERROR = MAX_ATTEMPTS_ERROR

# The first PostgreSQL whose B-tree skip scan walks jobs_claim_ix one priority
# level at a time by itself (``claim``); earlier servers get ``claim_walk``.
SKIP_SCAN_SINCE = (18,)

# Above any ``integer`` priority: the walk's first step finds the highest level.
_ABOVE_ANY_PRIORITY = 2**31


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
            *lapsed(),
            jobs.c.attempts >= jobs.c.max_attempts,
            *paused,
        )
        .with_for_update(skip_locked=True)
    )
    return move_to_dead(locked_ids, literal(LAPSED_EXHAUSTED_ERROR, type_=Text), name)


def _unexpired(table: FromClause = jobs) -> ColumnElement[bool]:
    return or_(table.c.expires_at.is_(None), table.c.expires_at > NOW)


def _lapsed_rows() -> CTE:
    """This queue's processing rows past their deadline: ONE scan of ``jobs_lapse_ix``.

    Unlocked and materialized (the burial and the reclaim both read it), so
    the lapse index -- and, under a long transaction, every dead entry in
    its lapsed range -- is walked once per claim, not twice.  Each consumer
    then locks its rows by primary key and re-checks them (a row another
    claim took meanwhile no longer matches and is skipped).
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
            _this_queue(),
            jobs.c.status == "processing",
            *lapsed(),
            not_paused(),
        )
        .cte("lapsed_rows")
        .prefix_with("MATERIALIZED")
    )


def _still_lapsed() -> tuple[ColumnElement[bool], ...]:
    """The lapse re-checked on a row of ``lapsed_rows`` once it is locked.

    ``status <> 'pending'`` is ``status = 'processing'`` (the status CHECK
    allows only the two) in a form the planner cannot match to
    ``jobs_lapse_ix``'s predicate: the row is then found by its id, as
    meant, instead of by a second scan of the lapse index (which the
    planner prefers when its statistics say the index is nearly empty,
    and which is what this design avoids).
    """
    return (jobs.c.status != "pending", jobs.c.claim_deadline <= NOW)


def _bury_exhausted_of(lapsed_rows: CTE) -> CTE:
    """Q12 in the claim: the exhausted ones among ``lapsed_rows``, locked and buried."""
    locked_ids: Select[tuple[int]] = (
        select(jobs.c.id)
        .where(
            id_among(
                select(lapsed_rows.c.id).where(lapsed_rows.c.attempts >= lapsed_rows.c.max_attempts)
            ),
            *_still_lapsed(),
            jobs.c.attempts >= jobs.c.max_attempts,
        )
        .with_for_update(skip_locked=True)
    )
    return move_to_dead(locked_ids, literal(LAPSED_EXHAUSTED_ERROR, type_=Text), "exhausted")


def _size() -> ColumnElement[int]:
    """A row's payload size in bytes, for the byte-bounded claim.

    ``octet_length`` of a ``bytea`` reads the stored value's length header;
    a payload kept out of line (TOAST) is not fetched to measure it.
    """
    return func.octet_length(jobs.c.payload).label("size")


def _keys(sized: bool) -> tuple[ColumnElement[Any], ...]:
    """What each candidate carries into ``picked``: its id and sort keys (and size)."""
    keys: tuple[ColumnElement[Any], ...] = (jobs.c.id, jobs.c.priority, jobs.c.run_at)
    return (*keys, _size()) if sized else keys


def _reclaimable_of(lapsed_rows: CTE, sized: bool = False) -> CTE:
    """Q11: the first ``:n`` lapsed rows with attempts left, in claim order, locked."""
    return (
        select(*_keys(sized))
        .where(
            id_among(
                select(lapsed_rows.c.id).where(
                    lapsed_rows.c.attempts < lapsed_rows.c.max_attempts,
                    _unexpired(lapsed_rows),
                )
            ),
            *_still_lapsed(),
            jobs.c.attempts < jobs.c.max_attempts,
            _unexpired(),
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
        .limit(bindparam("p_n", type_=Integer))
        .with_for_update(skip_locked=True)
        .cte("lapsed")
    )


def _due_walk() -> CTE:
    """Q9/Q10: the first ``:n`` due rows in claim order, locked -- one priority level at a time.

    A loose index scan of ``jobs_claim_ix`` (queue, priority DESC, run_at,
    id) WHERE pending.  Each step of the recursion:

    - ``level``: the first pending row (in index order) below the previous
      level's priority -- one index descent, whatever lies in that level;
    - ``got``: that level's due, unexpired rows from that row on, in
      (run_at, id) order, up to the ``:n`` still missing, FOR UPDATE SKIP
      LOCKED.  Its scan starts at the level's first row (a row
      comparison, so it does not walk again what ``level`` walked) and
      ends at ``run_at <= now``: a level's not-yet-due rows are never read.

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
        select(head.c.priority, head.c.claim_at, head.c.id)
        .where(
            head.c.queue == bindparam("p_queue", type_=Text),
            head.c.status == "pending",
            head.c.priority < prev.c.p,
        )
        .order_by(head.c.priority.desc(), head.c.claim_at, head.c.id)
        .limit(literal(1, type_=Integer))
        .lateral("level")
    )
    probe = (
        select(jobs.c.id)
        .where(
            _this_queue(),
            jobs.c.status == "pending",
            jobs.c.priority == level.c.priority,
            tuple_(jobs.c.claim_at, jobs.c.id) >= tuple_(level.c.claim_at, level.c.id),
            jobs.c.claim_at <= NOW,
            _unexpired(),
        )
        .order_by(jobs.c.claim_at, jobs.c.id)
        .limit(bindparam("p_n", type_=Integer) - prev.c.found)
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
        .where(prev.c.found < bindparam("p_n", type_=Integer))
    )
    return walk.union_all(step)


def _due_scan(sized: bool = False) -> Select[Any]:
    """The first ``:n`` due rows in claim order, locked: one ordered scan of ``jobs_claim_ix``.

    For PostgreSQL 18 and later, whose B-tree skip scan makes this one scan
    a loose index scan by itself: with ``queue =`` and ``run_at <=`` as index
    conditions and ``priority`` between them unconstrained, the scan skips
    from one priority value to the next (EXPLAIN shows ``Index Searches``),
    so a level's not-yet-due rows are never read -- at one descent per
    level, cheaper than the explicit walk and planned with one relation
    less.  Before 18 the same scan reads every pending row that outranks
    the due ones (``claim_walk``).
    """
    due = (
        select(*_keys(sized))
        .where(
            _this_queue(),
            _unexpired(),
            jobs.c.status == "pending",
            jobs.c.claim_at <= NOW,
            not_paused(),
        )
        .order_by(jobs.c.priority.desc(), jobs.c.claim_at, jobs.c.id)
        .limit(bindparam("p_n", type_=Integer))
        .with_for_update(skip_locked=True)
        .cte("due")
    )
    return select(due)


def _due_from_walk(sized: bool = False) -> Select[Any]:
    """The rows ``_due_walk`` took, with their sort keys (looked up by id)."""
    walk = _due_walk()
    return select(*_keys(sized)).where(id_among(select(func.unnest(walk.c.ids))))


def _claim(due: Select[Any], sized: bool = False) -> Update:
    lapsed_rows = _lapsed_rows()
    both = union_all(due, select(_reclaimable_of(lapsed_rows, sized))).subquery("both")
    order = (both.c.priority.desc(), both.c.run_at, both.c.id)
    if sized:
        picked = _within_bytes(both, order)
    else:
        picked = (
            select(both.c.id).order_by(*order).limit(bindparam("p_n", type_=Integer)).cte("picked")
        )
    return (
        update(jobs)
        .where(id_among(select(picked.c.id)))
        .values(
            status="processing",
            attempts=jobs.c.attempts + 1,
            worker_id=bindparam("p_worker_id", type_=Text),
            claim_deadline=NOW + jobs.c.visibility_timeout,
            deadline_floor=NOW + jobs.c.visibility_timeout,
        )
        .returning(*LIVE)
        .add_cte(_bury_exhausted_of(lapsed_rows))
    )


def _within_bytes(both: FromClause, order: tuple[ColumnElement[object], ...]) -> CTE:
    """``picked`` under a byte bound: the longest prefix, in claim order, of the first
    ``:n`` candidates whose payloads add up to at most ``:max_bytes`` -- and at least
    the first one, so a job bigger than the bound is still claimed, alone.

    The candidates are the same rows, in the same order, as the unbounded
    claim's: the bound only cuts the batch short (the rows locked and left
    out are free again when the statement ends, as the unbounded claim's
    surplus candidates are).  ``(priority, run_at, id)`` is unique, so the
    running sum's frame is exactly the rows before and at each one.
    """
    ranked = (
        select(
            both.c.id,
            func.row_number().over(order_by=order).label("nth"),
            func.sum(both.c.size).over(order_by=order, rows=(None, 0)).label("running"),
        )
        .order_by(*order)
        .limit(bindparam("p_n", type_=Integer))
        .cte("ranked")
    )
    return (
        select(ranked.c.id)
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
    return _claim(_due_scan())


@cache
def claim_walk() -> Update:
    """``claim`` with the due rows found by ``_due_walk``: flat before PostgreSQL 18 too."""
    return _claim(_due_from_walk())


@cache
def park() -> Update:
    """S3: set aside up to ``:limit`` of ``:queue``'s expired pending rows; RETURNING ids.

    A parked row keeps its status, its expiry and every field a caller
    reads: it is still pending, still counted expired, and still moved to
    dead by ``sweep_expired()`` (Q25).  Only its ``claim_at`` becomes
    +infinity, which takes it out of the due range of ``jobs_claim_ix``:
    claims stop reading it (until parked, each claim reads every expired row
    that outranks the due ones, on the heap, to see its ``expires_at``).
    Found through ``jobs_park_ix``, which holds only unparked expired
    candidates, so a park with nothing to do is one index descent.  Rows
    another transaction holds are skipped: the next park takes them.
    """
    candidates = (
        select(jobs.c.id)
        .where(
            _this_queue(),
            jobs.c.status == "pending",
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
    return _claim(_due_scan(sized=True), sized=True)


@cache
def claim_walk_bounded() -> Update:
    """``claim_walk`` under a byte bound (``claim_bounded``)."""
    return _claim(_due_from_walk(sized=True), sized=True)
