"""F1-F3, F5: flow control's limits, persisted per queue and read by the claim."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, Limits, Rate

from .._qtools import lapse, sql


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Limits(concurrency=0), ValueError),
        (lambda: Limits(concurrency=-3), ValueError),
        (lambda: Limits(concurrency=1.5), TypeError),
        (lambda: Limits(concurrency=True), TypeError),
        (lambda: Limits(group_concurrency=0), ValueError),
        (lambda: Limits(group_concurrency="2"), TypeError),
        (lambda: Limits(rate=(10, 1)), TypeError),
        (lambda: Rate(0, 1), ValueError),
        (lambda: Rate(1, 0), ValueError),
        (lambda: Rate(1, -1), ValueError),
        (lambda: Rate(1, timedelta(0)), ValueError),
        (lambda: Rate(1.0, 1), TypeError),
        (lambda: Rate(1, "1"), TypeError),
        (lambda: EnqueueOpts(group=""), ValueError),
        (lambda: EnqueueOpts(group="x" * 201), ValueError),
        (lambda: EnqueueOpts(group=7), TypeError),
        (lambda: EnqueueOpts(unique_key="k", on_conflict="update"), ValueError),
    ],
)
def test_f1_bad_limits_and_groups_are_refused_before_sql(make: Any, error: type) -> None:
    with pytest.raises(error):
        make()


def test_f1_rate_fields_and_a_timedelta_per() -> None:
    rate = Rate(100, per=timedelta(minutes=1))
    assert (rate.count, rate.per) == (100, 60.0)
    assert EnqueueOpts(group="x" * 200).group == "x" * 200


def test_f1_set_limits_persists_replaces_and_clears(qs: Any) -> None:
    q = qs.queue("f1")
    assert q.limits() is None
    q.set_limits(Limits(concurrency=3, group_concurrency=1))
    assert q.limits() == Limits(concurrency=3, group_concurrency=1)
    again = qs.queue("f1")  # another handle: the database's, not the object's
    assert again.limits() == Limits(concurrency=3, group_concurrency=1)
    q.set_limits(Limits(concurrency=5))  # replaces every limit
    assert q.limits() == Limits(concurrency=5)
    q.set_limits(None)
    assert q.limits() is None
    q.set_limits(Limits(concurrency=2))
    q.set_limits(Limits())  # no limit at all: removed too
    assert q.limits() is None
    with pytest.raises(TypeError):
        q.set_limits({"concurrency": 2})


def test_f1_limits_and_a_pause_keep_each_other(qs: Any) -> None:
    q = qs.queue("f1-pause")
    job_id = q.enqueue(b"x")
    assert q.pause() is True
    q.set_limits(Limits(concurrency=1))
    assert q.stats().paused is True
    assert q.claim_one("w") is None  # F5: paused, limits or not
    q.set_limits(None)
    assert q.stats().paused is True
    assert q.claim_one("w") is None
    q.set_limits(Limits(concurrency=1))
    assert q.resume() is True
    assert q.resume() is False
    assert q.limits() == Limits(concurrency=1)
    assert q.stats().paused is False
    assert q.claim_one("w").id == job_id
    assert q.pause() is True
    assert q.limits() == Limits(concurrency=1)


def test_f1_group_is_stored_shown_and_kept_by_a_requeue(qs: Any) -> None:
    q = qs.queue("f1-group")
    [a, b] = q.enqueue_many([b"a", b"b"], EnqueueOpts(group="tenant-7"))
    c = q.enqueue(b"c")
    assert q.get_job(a).group == "tenant-7" and q.get_job(c).group is None
    handles = {h.id: h for h in q.claim_batch("w", 3)}
    assert handles[b].job.group == "tenant-7"
    assert handles[a].fail("x") is True
    assert q.get_job(a).group == "tenant-7"  # dead, with its group
    assert q.requeue_dead([a]) == 1
    [requeued] = [j for j in q.jobs("pending")]
    assert requeued.group == "tenant-7"


def test_f2_a_claim_at_the_limit_gets_fewer_or_none(qs: Any) -> None:
    q = qs.queue("f2")
    q.enqueue_many([b"%d" % i for i in range(6)])
    q.set_limits(Limits(concurrency=2))
    first = q.claim_batch("w", 5)
    assert len(first) == 2
    assert q.claim_batch("w", 5) == []
    assert first[0].ack() is True
    assert len(q.claim_batch("w", 5)) == 1
    assert q.claim_one("w") is None
    q.set_limits(Limits(concurrency=4))  # the next claim reads the new limit
    assert len(q.claim_batch("w", 5)) == 2
    q.set_limits(None)
    assert len(q.claim_batch("w", 5)) == 1  # the last one: no limit any more


def test_f2_a_lapsed_claim_stops_counting_and_its_reclaim_counts(qs: Any, engine: Engine) -> None:
    q = qs.queue("f2-lapse")
    a, _b = q.enqueue_many([b"a", b"b"])
    q.set_limits(Limits(concurrency=1))
    [held] = q.claim_batch("w", 5)
    assert held.id == a
    assert q.claim_one("w") is None
    lapse(engine, a)
    # The lapsed job is reclaimed first (claim order) and fills the one slot (F5).
    again = q.claim_batch("w", 5)
    assert [h.id for h in again] == [a]
    assert q.claim_one("w") is None


def test_f2_every_way_a_slot_is_freed_lets_the_next_claim_in(qs: Any) -> None:
    q = qs.queue("f2-free")
    ids = q.enqueue_many([b"%d" % i for i in range(6)])
    q.set_limits(Limits(concurrency=1))
    for free in (
        lambda h: h.ack(),
        lambda h: h.retry("again", 3600),
        lambda h: h.fail("no"),
        lambda h: q.cancel(h.id),
        lambda h: h.snooze(3600),
    ):
        [h] = q.claim_batch("w", 3)
        assert q.claim_one("w") is None
        assert free(h)
    assert [h.id for h in q.claim_batch("w", 3)] == [ids[5]]


def test_f3_a_group_runs_one_at_a_time_in_claim_order(qs: Any) -> None:
    q = qs.queue("f3")
    g = q.enqueue_many([b"g%d" % i for i in range(4)], EnqueueOpts(group="g"))
    h = q.enqueue_many([b"h%d" % i for i in range(2)], EnqueueOpts(group="h"))
    free = q.enqueue(b"free")
    q.set_limits(Limits(group_concurrency=1))
    batch = q.claim_batch("w", 10)
    # One of each group, and the job without a group, in claim order.
    assert [x.id for x in batch] == [g[0], h[0], free]
    assert q.claim_batch("w", 10) == []
    started = [g[0]]
    by_id = {x.id: x for x in batch}
    for expected in g[1:]:
        assert by_id.pop(started[-1]).ack() is True
        got = q.claim_batch("w", 10)
        assert [x.id for x in got] == [expected]
        by_id.update({x.id: x for x in got})
        started.append(expected)
    assert started == g
    assert by_id[h[0]].ack() is True
    assert [x.id for x in q.claim_batch("w", 10)] == [h[1]]


def test_f3_rows_of_a_full_group_are_parked_then_promoted(qs: Any, engine: Engine) -> None:
    q = qs.queue("f3-park")
    g = q.enqueue_many([b"%d" % i for i in range(5)], EnqueueOpts(group="g"))
    q.set_limits(Limits(group_concurrency=2))
    got = q.claim_batch("w", 10)
    assert [x.id for x in got] == g[:2]
    parked = sql(
        engine,
        "SELECT id FROM alkstore.jobs WHERE queue = 'f3-park' AND parked ORDER BY id",
    )
    assert [r["id"] for r in parked] == g[2:]  # out of the claim index's range
    assert got[0].ack() is True  # promotes the group's next row
    assert [x.id for x in q.claim_batch("w", 10)] == [g[2]]
    q.set_limits(None)  # no group limit: every parked row is claimable again
    assert [x.id for x in q.claim_batch("w", 10)] == g[3:]


def test_f3_jobs_without_a_group_are_not_group_limited(qs: Any) -> None:
    q = qs.queue("f3-none")
    ids = q.enqueue_many([b"%d" % i for i in range(4)])
    q.set_limits(Limits(group_concurrency=1))
    assert [x.id for x in q.claim_batch("w", 10)] == ids


def test_f3_queue_and_group_limits_together(qs: Any) -> None:
    q = qs.queue("f3-both")
    q.enqueue_many([b"a%d" % i for i in range(3)], EnqueueOpts(group="a"))
    q.enqueue_many([b"b%d" % i for i in range(3)], EnqueueOpts(group="b"))
    q.enqueue_many([b"c%d" % i for i in range(3)], EnqueueOpts(group="c"))
    q.set_limits(Limits(concurrency=2, group_concurrency=2))
    got = q.claim_batch("w", 10)
    assert len(got) == 2 and {x.job.group for x in got} == {"a"}
    got[0].ack()
    [nxt] = q.claim_batch("w", 10)
    assert nxt.job.group == "a"  # claim order: a's last job came first


def test_f5_a_paused_limited_queue_claims_nothing_and_buries_nothing(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("f5")
    q.enqueue(b"x")
    q.set_limits(Limits(concurrency=5))
    assert q.pause() is True
    assert q.claim_batch("w", 5) == []
    assert q.resume() is True
    assert len(q.claim_batch("w", 5)) == 1


def test_f1_stats_show_the_limits_and_the_slots_in_use(qs: Any, engine: Engine) -> None:
    q = qs.queue("f1-stats")
    q.enqueue_many([b"a", b"b", b"c"])
    assert q.stats().limits is None
    q.set_limits(Limits(concurrency=2, group_concurrency=1))
    [a, _b] = q.claim_batch("w", 3)
    stats = q.stats()
    assert stats.limits == Limits(concurrency=2, group_concurrency=1)
    assert stats.slots_in_use == 2 and stats.paused is False
    lapse(engine, a.id)
    assert q.stats().slots_in_use == 1
    assert qs.stats()["f1-stats"].limits == Limits(concurrency=2, group_concurrency=1)


def test_f1_a_task_defers_into_a_group_through_opts(store: Any) -> None:
    from alkstore_sa import Tasks

    def send(order_id: int) -> None:
        return None

    task = Tasks(store).task(queue="f1-tasks")(send)
    job_id = task.defer(order_id=1, opts=EnqueueOpts(group="tenant-7"))
    again = task.configure(opts=EnqueueOpts(group="tenant-8")).defer(order_id=2)
    q = store.queue("f1-tasks")
    assert q.get_job(job_id).group == "tenant-7" and q.get_job(again).group == "tenant-8"


def test_f2_a_freed_slot_wakes_the_channel_only_if_the_queue_was_full(
    qs: Any, engine: Engine
) -> None:
    """Only a full queue has a worker waiting for a slot: an ack that frees one of a
    queue at its ``concurrency`` notifies once; one below it, or on a queue with
    rates only, sends nothing (a NOTIFY serializes the commits that send one)."""
    from .test_q_enqueue import listening

    q = qs.queue("f2-wake-full")
    q.enqueue_many([b"%d" % i for i in range(6)])
    q.set_limits(Limits(concurrency=3))
    with listening(engine, q.channel) as conn:
        below = q.claim_batch("w", 2)  # 2 of 3 slots in use
        assert below[0].ack() is True
        assert list(conn.notifies(timeout=0.5)) == []
        full = q.claim_batch("w", 10)  # 1 + 2: the queue is full
        assert len(full) == 2
        assert q.ack_batch([full[0].id, full[1].id]) == 2
        got = list(conn.notifies(timeout=5.0, stop_after=1)) + list(conn.notifies(timeout=0.3))
        assert [(n.channel, n.payload) for n in got] == [(q.channel, "")]
        q.set_limits(Limits(rate=Rate(100, per=60)))  # rates only: nobody waits on a slot
        assert len(list(conn.notifies(timeout=5.0, stop_after=1))) == 1  # set_limits' own
        [h] = q.claim_batch("w", 1)
        assert h.ack() is True
        assert list(conn.notifies(timeout=0.5)) == []
