"""F3 without the burst cliff: an enqueue into a group with no free slot parks its rows.

A claim parks the pending rows of a group it finds full (``parked``: out of
``jobs_claim_ix``'s range); rows enqueued into a group that is already full
start parked too, so a burst into full groups is never walked by the claims
that follow it.  Parking only moves rows out of the claim's range: the
limits are still checked by the claim, and a freed slot promotes the first
parked rows in claim order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, Limits

from .._qtools import sql


def _parked(engine: Engine, queue: str) -> list[int]:
    rows = sql(
        engine, "SELECT id FROM alkstore.jobs WHERE queue = :q AND parked ORDER BY id", q=queue
    )
    return [r["id"] for r in rows]


def test_f3_an_enqueue_into_a_full_group_starts_parked(qs: Any, engine: Engine) -> None:
    q = qs.queue("f3-enq-full")
    q.set_limits(Limits(group_concurrency=1))
    [first] = q.enqueue_many([b"first"], EnqueueOpts(group="g"))
    [running] = q.claim_batch("w", 10)
    assert running.id == first
    burst = q.enqueue_many([b"%d" % i for i in range(50)], EnqueueOpts(group="g"))
    one = q.enqueue(b"one", EnqueueOpts(group="g"))
    assert _parked(engine, "f3-enq-full") == [*burst, one]
    assert q.claim_batch("w", 10) == []
    assert running.ack() is True  # the freed slot promotes the first in claim order
    assert [x.id for x in q.claim_batch("w", 10)] == [burst[0]]


def test_f3_a_burst_into_a_group_with_free_slots_parks_only_what_does_not_fit(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("f3-enq-burst")
    q.set_limits(Limits(group_concurrency=3))
    ids = q.enqueue_many([b"%d" % i for i in range(10)], EnqueueOpts(group="g"))
    assert _parked(engine, "f3-enq-burst") == ids[3:]
    got = q.claim_batch("w", 10)
    assert [x.id for x in got] == ids[:3]
    for h in got:
        assert h.ack() is True
    assert [x.id for x in q.claim_batch("w", 10)] == ids[3:6]


def test_f3_a_group_with_rows_in_range_is_left_to_the_claims_parking(
    qs: Any, engine: Engine
) -> None:
    """A higher-priority row enqueued behind rows still in the claim's range is not
    parked (a promotion would then pass it over for them): claim order holds."""
    q = qs.queue("f3-enq-order")
    q.set_limits(Limits(group_concurrency=1))
    low = q.enqueue_many([b"low0", b"low1"], EnqueueOpts(group="g"))
    assert _parked(engine, "f3-enq-order") == [low[1]]
    # Both in the claim's range (as after a promotion), the group still at none live.
    sql(engine, "UPDATE alkstore.jobs SET parked = false WHERE queue = 'f3-enq-order'")
    urgent = q.enqueue(b"urgent", EnqueueOpts(group="g", priority=10))
    assert _parked(engine, "f3-enq-order") == []
    assert [x.id for x in q.claim_batch("w", 10)] == [urgent]


def test_f3_no_group_limit_no_parking_at_enqueue(qs: Any, engine: Engine) -> None:
    q = qs.queue("f3-enq-none")
    q.set_limits(Limits(concurrency=1))
    q.enqueue_many([b"%d" % i for i in range(5)], EnqueueOpts(group="g"))
    other = qs.queue("f3-enq-unlimited")
    other.enqueue_many([b"%d" % i for i in range(5)], EnqueueOpts(group="g"))
    assert _parked(engine, "f3-enq-none") == []
    assert _parked(engine, "f3-enq-unlimited") == []


def test_f3_keyed_and_kept_enqueues_park_alike(qs: Any, engine: Engine) -> None:
    q = qs.queue("f3-enq-keyed")
    q.set_limits(Limits(group_concurrency=1))
    a = q.enqueue(b"a", EnqueueOpts(group="g", unique_key="a"))
    [running] = q.claim_batch("w", 10)
    assert running.id == a
    b = q.enqueue(b"b", EnqueueOpts(group="g", unique_key="b", keep_completed=60))
    c = q.enqueue_many([b"c", b"d"], EnqueueOpts(group="g", keep_completed=60))
    d = q.enqueue_many([b"e", b"f"], EnqueueOpts(group="g"), unique_keys=["e", "f"])
    assert _parked(engine, "f3-enq-keyed") == [b, *c, *d]
    assert running.ack() is True
    assert [x.id for x in q.claim_batch("w", 10)] == [b]
