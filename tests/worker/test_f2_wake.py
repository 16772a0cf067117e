"""F2: a slot freed by an ack on a limited queue wakes a waiting worker at once (its
LISTEN), long before its re-poll; F3: in a worker, a group's jobs run one at a
time in claim order while another group flows."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import EnqueueOpts, Job, Limits, Store

from .._workers import KINDS, handler, start_worker, wait_for, worker_class


@pytest.mark.parametrize("kind", KINDS)
def test_f2_an_ack_elsewhere_wakes_a_worker_waiting_on_the_limit(
    kind: str, database_url: URL, engine: Engine
) -> None:
    ran: list[float] = []
    with Store(engine) as store:
        q = store.queue("f2-wake")
        q.set_limits(Limits(concurrency=1))
        q.enqueue_many([b"a", b"b"])
        [held] = q.claim_batch("outside", 1)  # the one slot, held outside the worker

        def build(s: Any) -> Any:
            work = handler(kind, lambda job: ran.append(time.monotonic()))
            return worker_class(kind)({s.queue("f2-wake"): work}, poll_interval=30)

        running = start_worker(kind, database_url, build)
        try:
            wait_for(lambda: running.worker.health().listener_connected, timeout=10)
            time.sleep(0.2)  # it claimed once at start, got nothing (the limit)
            assert ran == []
            acked = time.monotonic()
            assert held.ack() is True
            wait_for(lambda: ran, timeout=5)
            assert ran[0] - acked < 1.0  # the wake, not the 30 s re-poll
        finally:
            running.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_f3_a_worker_runs_a_group_one_at_a_time_in_order_while_others_flow(
    kind: str, database_url: URL, engine: Engine
) -> None:
    spans: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def work(job: Job) -> None:
        with lock:
            spans.append(("start", job.id, job.group or ""))
        time.sleep(0.01)
        with lock:
            spans.append(("end", job.id, job.group or ""))

    async def awork(job: Job) -> None:  # the loop must stay free for the other group
        spans.append(("start", job.id, job.group or ""))
        await asyncio.sleep(0.01)
        spans.append(("end", job.id, job.group or ""))

    with Store(engine) as store:
        q = store.queue("f3-worker")
        q.set_limits(Limits(group_concurrency=1))
        a = q.enqueue_many([b"a"] * 6, EnqueueOpts(group="a"))
        q.enqueue_many([b"b"] * 6, EnqueueOpts(group="b"))

        def build(s: Any) -> Any:
            return worker_class(kind)(
                {s.queue("f3-worker"): work if kind == "sync" else awork},
                concurrency=4,
                poll_interval=0.2,
            )

        running = start_worker(kind, database_url, build)
        try:
            wait_for(lambda: len([s for s in spans if s[0] == "end"]) == 12, timeout=20)
        finally:
            running.stop()
    live: dict[str, int] = {"a": 0, "b": 0}
    both = 0
    for event, _, group in spans:
        live[group] += 1 if event == "start" else -1
        assert live[group] <= 1
        both = max(both, live["a"] + live["b"])
    assert both == 2  # the two groups ran side by side
    assert [i for e, i, g in spans if e == "start" and g == "a"] == a  # in claim order
