"""F2, F3: claims racing at N - 1 live claims never pass the limit (READ COMMITTED,
separate connections, separate queue objects)."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine

from alkstore_sa import EnqueueOpts, Limits

from .._qtools import sql

ROUNDS = 15


def _race(claimers: list[Any], n: int) -> int:
    """Every claimer claims ``n`` at once; how many jobs they got between them."""
    start = threading.Barrier(len(claimers))
    got: list[int] = []

    def run(q: Any) -> None:
        start.wait()
        got.append(len(q.claim_batch("w", n)))

    threads = [threading.Thread(target=run, args=(q,)) for q in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(got)


def _processing(engine: Engine, queue: str, group: str | None = None) -> int:
    rows = sql(
        engine,
        "SELECT count(*) AS n FROM alkstore.jobs WHERE queue = :q AND status = 'processing'"
        " AND (CAST(:g AS text) IS NULL OR grp = :g)",
        q=queue,
        g=group,
    )
    return int(rows[0]["n"])


def test_f2_two_claims_at_n_minus_1_never_pass_the_limit(qs: Any, engine: Engine) -> None:
    for i in range(ROUNDS):
        name = f"f2-race-{i}"
        q = qs.queue(name)
        q.enqueue_many([b"x"] * 6)
        q.set_limits(Limits(concurrency=3))
        assert len(q.claim_batch("w", 2)) == 2  # N - 1 held
        assert _race([qs.queue(name), qs.queue(name)], 2) == 1
        assert _processing(engine, name) == 3


def test_f3_two_claims_at_k_minus_1_never_pass_the_group_limit(qs: Any, engine: Engine) -> None:
    for i in range(ROUNDS):
        name = f"f3-race-{i}"
        q = qs.queue(name)
        q.enqueue_many([b"x"] * 6, EnqueueOpts(group="g"))
        q.set_limits(Limits(group_concurrency=2))
        assert len(q.claim_batch("w", 1)) == 1  # K - 1 held
        assert _race([qs.queue(name), qs.queue(name)], 3) == 1
        assert _processing(engine, name, "g") == 2


def test_f3_enqueues_into_a_full_group_while_claims_run_stay_within_it(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("f3-race-enqueue")
    q.set_limits(Limits(group_concurrency=2))
    q.enqueue_many([b"x"] * 2, EnqueueOpts(group="g"))
    stop = threading.Event()
    peak = [0]

    def enqueue() -> None:
        while not stop.is_set():
            q.enqueue(b"y", EnqueueOpts(group="g"))

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _processing(engine, "f3-race-enqueue", "g"))

    threads = [threading.Thread(target=enqueue), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        others = [qs.queue("f3-race-enqueue") for _ in range(2)]
        for _ in range(10):
            _race(others, 2)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert _processing(engine, "f3-race-enqueue", "g") == 2
    assert peak[0] <= 2


def test_f2_limits_raised_and_lowered_between_claims_bound_each_claim(
    qs: Any, engine: Engine
) -> None:
    name = "f2-race-change"
    q = qs.queue(name)
    q.enqueue_many([b"x"] * 20)
    q.set_limits(Limits(concurrency=2))
    assert _race([qs.queue(name), qs.queue(name)], 5) == 2
    q.set_limits(Limits(concurrency=5))
    assert _race([qs.queue(name), qs.queue(name)], 5) == 3
    q.set_limits(Limits(concurrency=1))  # lowered under the claims in flight
    assert _race([qs.queue(name), qs.queue(name)], 5) == 0
    assert _processing(engine, name) == 5
