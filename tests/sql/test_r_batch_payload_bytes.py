"""A claim's byte bound : ``max_batch_payload_bytes`` on ``claim_batch`` and the workers.

A bounded claim takes, in claim order (Q9), the longest run of its
candidates whose payloads add up to at most the bound -- and always the
first one, so a job bigger than the bound still runs, alone.  The bound is
applied in the claim statement (a running sum of ``octet_length(payload)``),
so the rows past it are never read into the client.  Without a bound the
claim is the statement it always was.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import URL, create_engine

from alkstore_sa import AsyncWorker, EnqueueOpts, QueueOpts, Worker
from alkstore_sa._extras.instrument import Observer, install, uninstall
from alkstore_sa._values.job import Job

from .._qtools import lapse
from .._sqlspy import SqlSpy, sync_engine_of
from .._workers import KINDS, handler, start_worker, wait_for


def test_r_batch_bytes_a_batch_stops_at_the_byte_bound(qs: Any) -> None:
    q = qs.queue("bytes")
    ids = q.enqueue_many([b"x" * 100 for _ in range(7)])
    # 100 + 100 <= 250 < 300: two jobs, though ten were asked for.
    first = q.claim_batch("w", 10, max_batch_payload_bytes=250)
    assert [h.id for h in first] == ids[:2]
    # A bound met exactly still takes the job that meets it.
    second = q.claim_batch("w", 10, max_batch_payload_bytes=300)
    assert [h.id for h in second] == ids[2:5]
    # n still caps the batch when the bytes would allow more.
    third = q.claim_batch("w", 1, max_batch_payload_bytes=10_000)
    assert [h.id for h in third] == ids[5:6]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=10_000)] == ids[6:]
    assert q.stats().processing == 7


def test_r_batch_bytes_a_job_bigger_than_the_bound_is_claimed_alone(qs: Any) -> None:
    q = qs.queue("bytes")
    big, small, smaller = q.enqueue_many([b"B" * 5000, b"s" * 10, b"t" * 10])
    [only] = q.claim_batch("w", 10, max_batch_payload_bytes=100)
    assert only.id == big and only.payload == b"B" * 5000
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [small, smaller]
    # The big one comes second: the batch stops before it, it is not skipped.
    q2 = qs.queue("bytes2")
    a, huge, c = q2.enqueue_many([b"a" * 10, b"H" * 5000, b"c" * 10])
    assert [h.id for h in q2.claim_batch("w", 10, max_batch_payload_bytes=100)] == [a]
    assert [h.id for h in q2.claim_batch("w", 10, max_batch_payload_bytes=100)] == [huge]
    assert [h.id for h in q2.claim_batch("w", 10, max_batch_payload_bytes=100)] == [c]


def test_r_batch_bytes_keep_the_claim_order_q9(qs: Any) -> None:
    q = qs.queue("bytes")
    plain = qs.queue("plain")
    # The same jobs in two queues, enqueued out of claim order: priorities,
    # then run_at (a delay), then ids.
    specs = [(0, 0.0), (5, 0.0), (0, 0.0), (5, 0.0), (9, 0.0), (0, 0.0), (5, 0.0)]
    for i, (priority, _) in enumerate(specs):
        payload = b"%d" % i * (20 + 13 * i)
        for queue in (q, plain):
            queue.enqueue(payload, EnqueueOpts(priority=priority))
    unbounded = [h.payload for h in plain.claim_batch("w", 100)]
    bounded: list[bytes] = []
    while batch := q.claim_batch("w", 100, max_batch_payload_bytes=120):
        assert sum(len(h.payload) for h in batch) <= 120 or len(batch) == 1
        bounded += [h.payload for h in batch]
    assert bounded == unbounded


def test_r_batch_bytes_count_lapsed_reclaims_too(qs: Any, engine: Any) -> None:
    q = qs.queue("bytes", QueueOpts(visibility_timeout=60))
    lapsing = q.enqueue(b"L" * 80, EnqueueOpts(priority=1))
    [held] = q.claim_batch("w", 1)
    assert held.id == lapsing
    pending = q.enqueue_many([b"p" * 80, b"q" * 80])
    lapse(engine, lapsing)
    # The reclaim (priority 1) comes first and counts against the bound.
    batch = q.claim_batch("w2", 10, max_batch_payload_bytes=170)
    assert [h.id for h in batch] == [lapsing, pending[0]]
    assert batch[0].job.attempts == 2


def test_r_batch_bytes_is_validated_before_any_sql(qs: Any) -> None:
    q = qs.queue("bytes")
    q.enqueue(b"x")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        before = spy.count
        for bad, error in ((0, ValueError), (-5, ValueError), (1.5, TypeError), (True, TypeError)):
            with pytest.raises(error, match="max_batch_payload_bytes"):
                q.claim_batch("w", 10, max_batch_payload_bytes=bad)
        # Checked even when n asks for nothing.
        with pytest.raises(ValueError, match="max_batch_payload_bytes"):
            q.claim_batch("w", 0, max_batch_payload_bytes=0)
        assert spy.count == before
    finally:
        spy.close()
    assert q.stats().due == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_r_batch_bytes_a_worker_refuses_a_bad_bound_when_built(store: Any, bad: object) -> None:
    q = store.queue("bytes")
    with pytest.raises((TypeError, ValueError), match="max_batch_payload_bytes"):
        Worker({q: lambda job: None}, max_batch_payload_bytes=bad)  # type: ignore[arg-type]


class _Batches(Observer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[int]] = []

    def claimed(self, queue: str, jobs: Sequence[Job]) -> None:
        with self.lock:
            self.batches.append([len(job.payload) for job in jobs])


@pytest.fixture
def batches() -> Iterator[_Batches]:
    observer = _Batches()
    install(observer)
    yield observer
    uninstall(observer)


@pytest.mark.parametrize("kind", KINDS)
def test_r_batch_bytes_a_worker_claims_within_its_bound_and_drains_the_queue(
    kind: str, database_url: URL, batches: _Batches
) -> None:
    seed = create_engine(database_url)
    try:
        from alkstore_sa import Store

        with Store(seed) as s:
            s.queue("bytes").enqueue_many([b"x" * 100 for _ in range(12)] + [b"B" * 1000])
    finally:
        seed.dispose()
    done: list[int] = []
    lock = threading.Lock()

    def record(job: Job) -> None:
        with lock:
            done.append(job.id)

    def build(store: Any) -> Worker | AsyncWorker:
        cls = Worker if kind == "sync" else AsyncWorker
        return cls(
            {store.queue("bytes"): handler(kind, record)},
            concurrency=8,
            # Far longer than the test: a batch cut short by the bound must be
            # followed by the next claim at once, not by the re-poll.
            poll_interval=timedelta(seconds=30),
            sweep_interval=None,
            vacuum_interval=None,
            handle_signals=False,
            max_batch_payload_bytes=250,
        )

    running = start_worker(kind, database_url, build)
    try:
        wait_for(lambda: len(done) == 13, timeout=10)
    finally:
        running.stop()
    with batches.lock:
        seen = list(batches.batches)
    assert sum(len(b) for b in seen) == 13
    for batch in seen:
        assert sum(batch) <= 250 or len(batch) == 1, seen
    assert [1000] in seen  # the big one, alone


def test_r_batch_bytes_the_walk_for_postgresql_before_18_bounds_alike(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server here is 18: make _ops pick the pre-18 walk (claim_walk_bounded).
    from alkstore_sa._db.sql import claim as claim_sql

    monkeypatch.setattr(claim_sql, "SKIP_SCAN_SINCE", (999,))
    q = store.queue("walk")
    low = q.enqueue_many([b"l" * 60, b"m" * 60], EnqueueOpts(priority=0))
    high = q.enqueue_many([b"h" * 60, b"H" * 500], EnqueueOpts(priority=3))
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [high[0]]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=100)] == [high[1]]
    assert [h.id for h in q.claim_batch("w", 10, max_batch_payload_bytes=130)] == low


def test_r_batch_bytes_an_unbounded_claim_is_the_statement_it_always_was() -> None:
    from sqlalchemy.dialects import postgresql

    from alkstore_sa._db.sql import claim as claim_sql

    dialect = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    for plain, bounded in (
        (claim_sql.claim(), claim_sql.claim_bounded()),
        (claim_sql.claim_walk(), claim_sql.claim_walk_bounded()),
    ):
        text = str(plain.compile(dialect=dialect))
        assert "octet_length" not in text and "OVER" not in text and "p_max_bytes" not in text
        bounded_text = str(bounded.compile(dialect=dialect))
        assert "octet_length" in bounded_text and "p_max_bytes" in bounded_text
