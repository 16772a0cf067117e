"""F4: rates per queue and per group, on the database clock, across claims."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, Limits, Rate

from .._workers import KINDS


def test_f4_a_queue_rate_caps_claims_per_window(qs: Any) -> None:
    q = qs.queue("f4")
    q.enqueue_many([b"x"] * 10)
    q.set_limits(Limits(rate=Rate(3, per=60)))  # a window no test outlasts
    assert q.limits() == Limits(rate=Rate(3, 60))
    first = q.claim_batch("w", 10)
    assert len(first) == 3
    assert q.claim_batch("w", 10) == []  # the window is full; acks do not refill it
    for h in first:
        h.ack()
    assert q.claim_batch("w", 10) == []


def test_f4_a_queue_rates_window_reopens_after_per(qs: Any) -> None:
    # 1 s: what a loaded CI machine's few statements cannot outlast (0.5 s was
    # outlasted once by a claim and three acks on the async face).
    q = qs.queue("f4-reopen")
    q.enqueue_many([b"x"] * 10)
    q.set_limits(Limits(rate=Rate(3, per=1.0)))
    assert len(q.claim_batch("w", 10)) == 3
    assert q.claim_batch("w", 10) == []
    time.sleep(1.05)
    assert len(q.claim_batch("w", 2)) == 2
    assert len(q.claim_batch("w", 10)) == 1


def test_f4_a_group_rate_caps_each_group_and_not_the_others(qs: Any) -> None:
    q = qs.queue("f4-group")
    q.enqueue_many([b"a"] * 4, EnqueueOpts(group="a"))
    q.enqueue_many([b"b"] * 4, EnqueueOpts(group="b"))
    q.enqueue_many([b"n"] * 2)
    q.set_limits(Limits(group_rate=Rate(2, per=60)))
    got = q.claim_batch("w", 20)
    groups = [h.job.group for h in got]
    assert groups.count("a") == 2 and groups.count("b") == 2 and groups.count(None) == 2
    assert q.claim_batch("w", 20) == []


def test_f4_set_limits_none_forgets_the_rate_history(qs: Any, engine: Engine) -> None:
    q = qs.queue("f4-clear")
    q.enqueue_many([b"x"] * 4)
    q.set_limits(Limits(rate=Rate(1, per=3600)))
    assert len(q.claim_batch("w", 4)) == 1
    assert q.claim_batch("w", 4) == []
    q.set_limits(None)
    q.set_limits(Limits(rate=Rate(1, per=3600)))
    assert len(q.claim_batch("w", 4)) == 1


def test_f4_rate_and_concurrency_together(qs: Any) -> None:
    q = qs.queue("f4-both")
    q.enqueue_many([b"x"] * 10)
    q.set_limits(Limits(concurrency=2, rate=Rate(3, per=60)))
    first = q.claim_batch("w", 10)
    assert len(first) == 2
    first[0].ack()
    assert len(q.claim_batch("w", 10)) == 1
    first[1].ack()
    assert q.claim_batch("w", 10) == []  # a slot, but no rate left


# The two worker tests below bound how late a claim may follow a window's reopening.
# A worker sleeping out its 30 s re-poll, or a wait computed from the wrong window,
# misses the bound on every run; a shared, loaded machine (CI runs four test
# processes on two cores) misses it now and then by a scheduling delay.  So the
# safety half (no window over its count, no claim before its window reopened) is
# asserted on every attempt, and the timing half must hold on one of ATTEMPTS.
ATTEMPTS = 3


def _within_one_of(attempts: int, attempt: Any) -> None:
    """Run ``attempt(i)`` (it asserts the safety rules, returns ``(ok, figures)``)
    until one is ``ok``; fail with every attempt's figures if none is."""
    seen = []
    for i in range(attempts):
        ok, figures = attempt(i)
        if ok:
            return
        seen.append(figures)
    raise AssertionError(f"the timing bound failed in all {attempts} attempts: {seen}")


def test_f4_a_worker_held_back_by_a_rate_sleeps_until_it_may_claim(
    database_url: Any, engine: Engine
) -> None:
    """A Worker drains a backlog at the queue's rate: from each job's claim time (the
    database's: its claim deadline less its visibility timeout), no window of ``per``
    holds more than ``count`` claims, the backlog keeps the rate close to full
    (>= 0.9 x), and the worker waits on its due timer (``poll_interval`` is 30 s)."""
    from datetime import timedelta

    from alkstore_sa import Job, Store, Worker

    from .._qtools import sql
    from .._workers import start_worker, wait_for

    count, per, total = 5, 0.4, 20

    def attempt(i: int) -> tuple[bool, float]:
        table, name = f"f4_claims_{i}", f"f4-worker-{i}"
        sql(engine, f"CREATE TABLE {table} (job_id bigint, at timestamptz)")
        with Store(engine) as store:
            q = store.queue(name)
            q.set_limits(Limits(rate=Rate(count, per=per)))
            q.enqueue_many([b"x"] * total)

            def work(job: Job) -> None:
                assert job.claim_deadline is not None
                at = job.claim_deadline - timedelta(seconds=job.visibility_timeout)
                sql(engine, f"INSERT INTO {table} VALUES (:i, :at)", i=job.id, at=at)

            running = start_worker(
                "sync",
                database_url,
                lambda s: Worker({s.queue(name): work}, concurrency=8, poll_interval=30),
            )
            try:
                wait_for(lambda: q.stats().due + q.stats().processing == 0, timeout=20)
            finally:
                running.stop()
        worst = sql(
            engine,
            f"SELECT max(n) AS n FROM (SELECT (SELECT count(*) FROM {table} b"
            f" WHERE b.at >= a.at AND b.at < a.at + :per) AS n FROM {table} a) w",
            per=timedelta(seconds=per),
        )[0]["n"]
        span = float(
            sql(engine, f"SELECT extract(epoch FROM max(at) - min(at)) AS s FROM {table}")[0]["s"]
        )
        assert worst <= count
        # 20 jobs at 5 per 0.4 s: three full windows from the first claim to the
        # last, give or take a claim's round trip per window (>= 0.9 x sustained).
        return span <= (total / count - 1) * per / 0.9, span

    _within_one_of(ATTEMPTS, attempt)


@pytest.mark.parametrize("kind", KINDS)
def test_f4_a_worker_held_back_by_a_group_rate_claims_when_its_window_reopens(
    kind: str, database_url: Any, engine: Engine
) -> None:
    """A group's rate, not the queue's, holds the worker back: its claim reports when
    the group's window reopens and the worker's due timer (V5) claims then -- each
    batch is claimed within 250 ms, and its handlers start within 300 ms, of the
    window opened by the batch before (from start rows the handlers write with
    ``clock_timestamp()`` and each claim's database time), not at the re-poll
    (``poll_interval`` is 30 s here)."""
    from datetime import timedelta

    from alkstore_sa import Job, Store

    from .._qtools import sql
    from .._workers import handler, start_worker, wait_for, worker_class

    count, per, total = 3, 0.5, 9

    def attempt(i: int) -> tuple[bool, dict[str, Any]]:
        table, name = f"f4g_starts_{i}", f"f4-group-worker-{i}"
        sql(engine, f"CREATE TABLE {table} (job_id bigint, claimed timestamptz, at timestamptz)")
        with Store(engine) as store:
            q = store.queue(name)
            q.set_limits(Limits(group_rate=Rate(count, per=per)))
            q.enqueue_many([b"x"] * total, EnqueueOpts(group="g"))

            def work(job: Job) -> None:
                assert job.claim_deadline is not None
                claimed = job.claim_deadline - timedelta(seconds=job.visibility_timeout)
                sql(
                    engine,
                    f"INSERT INTO {table} VALUES (:i, :c, clock_timestamp())",
                    i=job.id,
                    c=claimed,
                )

            running = start_worker(
                kind,
                database_url,
                lambda s: worker_class(kind)(
                    {s.queue(name): handler(kind, work)}, concurrency=8, poll_interval=30
                ),
            )
            try:
                wait_for(lambda: q.stats().due + q.stats().processing == 0, timeout=10)
            finally:
                running.stop()
        # Batches by claim time; each after the first: its first start less the
        # window the batch before it opened (its claim time + per).
        late = sql(
            engine,
            f"WITH b AS (SELECT claimed, min(at) AS first, count(*) AS n FROM {table}"
            " GROUP BY claimed)"
            " SELECT count(*) AS batches, max(n) AS most,"
            " max(extract(epoch FROM first - (prev + :per))) AS worst,"
            " max(extract(epoch FROM claimed - (prev + :per))) AS claim_late,"
            " min(extract(epoch FROM claimed - (prev + :per))) AS earliest"
            " FROM (SELECT *, lag(claimed) OVER (ORDER BY claimed) AS prev FROM b) w",
            per=timedelta(seconds=per),
        )[0]
        assert late["batches"] == total // count and late["most"] == count
        assert float(late["earliest"]) >= 0  # no claim before the window reopened
        # A few tens of ms on a quiet machine, 0.1-0.2 s with a CI run beside it;
        # the bugs this tells are a window (0.5 s) or a re-poll (30 s) late, and a
        # claim in a loop would claim before the window.
        ok = float(late["claim_late"]) < 0.25 and float(late["worst"]) < 0.3
        return ok, dict(late)

    _within_one_of(ATTEMPTS, attempt)
