"""``max_batch_payload_bytes`` on a queue with limits (F2, F3, F4): the limited claim
stops at the byte bound by the unlimited claim's rule (the longest run in claim
order whose payloads fit, at least one job), over the rows the limits let
through -- and what the bound leaves out is not counted against any limit."""

from __future__ import annotations

from typing import Any

from alkstore_sa import EnqueueOpts, Limits, Rate


def test_f2_a_limited_claim_stops_at_the_byte_bound(qs: Any) -> None:
    q = qs.queue("fbytes")
    ids = q.enqueue_many([b"x" * 100 for _ in range(7)])
    q.set_limits(Limits(concurrency=5))
    first = q.claim_batch("w", 10, max_batch_payload_bytes=250)
    assert [h.id for h in first] == ids[:2]
    # The bound met exactly takes the job that meets it; the limit then cuts at 5.
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=300)] == ids[2:5]
    assert q.claim_batch("w", 10, max_batch_payload_bytes=10_000) == []
    first[0].ack()
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=10_000)] == ids[5:6]


def test_f2_a_job_bigger_than_the_bound_is_claimed_alone_on_a_limited_queue(qs: Any) -> None:
    q = qs.queue("fbytes-big")
    a, huge, c = q.enqueue_many([b"a" * 10, b"H" * 5000, b"c" * 10])
    q.set_limits(Limits(concurrency=10))
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [a]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [huge]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [c]


def test_f3_the_byte_bound_counts_only_rows_the_group_limit_lets_through(qs: Any) -> None:
    q = qs.queue("fbytes-groups")
    a1, a2 = q.enqueue_many([b"a" * 100] * 2, EnqueueOpts(group="a"))
    b1, _ = q.enqueue_many([b"b" * 100] * 2, EnqueueOpts(group="b"))
    c1, _ = q.enqueue_many([b"c" * 100] * 2, EnqueueOpts(group="c"))
    q.set_limits(Limits(group_concurrency=1))
    # a2 is not a candidate (a is full with a1): the 250 bytes are a1 and b1.
    got = q.claim_batch("w", 10, max_batch_payload_bytes=250)
    assert [h.id for h in got] == [a1, b1]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=250)] == [c1]
    assert q.claim_batch("w", 10, max_batch_payload_bytes=250) == []
    got[0].ack()
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=250)] == [a2]


def test_f4_rows_the_byte_bound_leaves_out_do_not_use_the_rate(qs: Any) -> None:
    q = qs.queue("fbytes-rate")
    ids = q.enqueue_many([b"x" * 100 for _ in range(5)])
    q.set_limits(Limits(rate=Rate(3, per=3600)))
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=150)] == ids[:1]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=10_000)] == ids[1:3]
    assert q.claim_batch("w", 10, max_batch_payload_bytes=10_000) == []
