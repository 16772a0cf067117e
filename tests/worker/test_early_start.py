"""A claim's handlers start where its reply lands (L1's wake path, Q26, Q27).

A ``Worker``'s claim runs on a thread of its own; the handlers of the slots
free when it went out are started from that thread, before the event loop
has seen the reply (``Executor.early_start``).  What must hold whatever
thread starts them: no more than ``concurrency`` run, nothing starts once
the run is stopping (Q27), jobs claimed ahead still wait their turn, and a
handler started from a reply is settled even when the wait for that reply
failed.  The fake-clock tests drive the runtime through a port that calls
``on_reply`` on the loop; the last two run a real ``Worker`` on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import Job, Store, Worker
from alkstore_sa.worker import _sync_runner
from alkstore_sa.worker._state import QueueBinding
from alkstore_sa.worker._supervisor import Supervisor

from .. import _fakeclock
from .._fakebackend import FakeBackend, FakeDB, FakePort, bind, run_for, settings
from .._workers import start_worker, wait_for


def _run(test: object) -> None:
    _fakeclock.run(test)  # type: ignore[arg-type]


class _ReplyPort(FakePort):
    """Records, for each handler it starts, whether a claim was still under way.

    ``fail_after_reply``: the claim raises once its reply was handed on (as
    an abandoned wait whose reply came in late does)."""

    def __init__(self, db: FakeDB, handler: Any, *, fail_after_reply: bool = False) -> None:
        super().__init__(db, handler)
        self.started_in_claim: list[tuple[int, bool]] = []
        self._in_claim = False
        self._fail_after_reply = fail_after_reply

    async def claim(
        self,
        worker_id: str,
        n: int,
        max_batch_payload_bytes: int | None = None,
        *,
        on_reply: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        def reply(jobs: list[Job]) -> None:
            self._in_claim = True
            try:
                if on_reply is not None:
                    on_reply(jobs)
            finally:
                self._in_claim = False

        jobs = await super().claim(worker_id, n, max_batch_payload_bytes, on_reply=reply)
        if self._fail_after_reply and jobs:
            self._fail_after_reply = False
            raise ConnectionError("the wait for the reply failed after it came in")
        return jobs

    def start(
        self, job: Job, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        self.started_in_claim.append((job.id, self._in_claim))
        return super().start(job, scope)


def _bound(db: FakeDB, port: _ReplyPort) -> QueueBinding:
    binding = bind(db, _sleeper(0.0))
    return QueueBinding(binding.core, binding.handler, port)


def _sleeper(seconds: float) -> Any:
    async def handler(job: Job) -> None:
        await asyncio.sleep(seconds)

    return handler


def test_q26_the_free_slots_handlers_start_from_the_claims_reply() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        ids = [db.enqueue(notify=False) for _ in range(5)]
        running = [0, 0]  # now, most at once

        async def counted(job: Job) -> None:
            running[0] += 1
            running[1] = max(running)
            await asyncio.sleep(1.0)
            running[0] -= 1

        port = _ReplyPort(db, counted)
        sup = Supervisor(settings(concurrency=2, poll_interval=60.0))
        await run_for(sup, [_bound(db, port)], FakeBackend(listen_after=0.0), stop_at=4.0)
        # Two slots, two jobs a claim, each started from its reply; never more than two run.
        assert running[1] == 2
        assert port.started_in_claim[:2] == [(ids[0], True), (ids[1], True)]
        assert all(in_claim for _, in_claim in port.started_in_claim)
        assert sorted(i for i, _ in port.started_in_claim) == ids
        assert not db.rows  # all five acked

    _run(scenario())


def test_q26_jobs_claimed_ahead_start_from_the_loop_in_claim_order() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        for _ in range(40):
            db.enqueue(notify=False)
        port = _ReplyPort(db, _sleeper(0.001))  # short: the worker claims a batch ahead
        sup = Supervisor(settings(concurrency=4, poll_interval=60.0))
        await run_for(sup, [_bound(db, port)], FakeBackend(listen_after=0.0), stop_at=1.0)
        started = [job_id for job_id, _ in port.started_in_claim]
        assert started == sorted(started)  # claim order, whoever started them
        assert not all(in_claim for _, in_claim in port.started_in_claim)  # ahead ones waited
        assert not db.rows

    _run(scenario())


def test_q27_a_reply_landing_after_the_stop_starts_nothing() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.claim_latency = 0.01
        job_id = db.enqueue(notify=False)
        port = _ReplyPort(db, _sleeper(0.0))
        sup = Supervisor(settings(concurrency=2, poll_interval=60.0))
        await run_for(sup, [_bound(db, port)], FakeBackend(listen_after=0.0), stop_at=0.005)
        assert db.times("claim") == [0.01]
        assert port.started_in_claim == []  # the stop came while the claim was out
        row = db.rows[job_id]
        assert (row.job.status, row.job.attempts) == ("pending", 1)  # given back (Q27)

    _run(scenario())


def test_q27_handlers_started_from_a_reply_are_settled_when_the_claim_then_fails() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        ids = [db.enqueue(notify=False) for _ in range(2)]
        port = _ReplyPort(db, _sleeper(0.1), fail_after_reply=True)
        sup = Supervisor(settings(concurrency=2, poll_interval=60.0))
        await run_for(sup, [_bound(db, port)], FakeBackend(listen_after=0.0), stop_at=1.0)
        assert [i for i, _ in port.started_in_claim] == ids  # each started once
        acked = [claim[0] for c in db.calls if c.op == "ack" for claim in c.args]
        assert sorted(acked) == ids and not db.rows

    _run(scenario())


# -- a real Worker ---------------------------------------------------------------


def _starting_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread each sync handler is started from."""
    names: list[str] = []
    original = _sync_runner.SyncRunner.start

    def start(self: Any, *args: Any) -> Any:
        names.append(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(_sync_runner.SyncRunner, "start", start)
    return names


def test_q26_a_workers_claim_thread_starts_the_handlers_of_the_free_slots(
    database_url: URL, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _starting_threads(monkeypatch)
    ran: list[int] = []
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker({s.queue("early"): lambda job: ran.append(job.id)}, poll_interval=60.0),
    )
    try:
        wait_for(lambda: running.worker.health().listener_connected, timeout=10)
        for _ in range(3):
            job_id = store.queue("early").enqueue(b"x")
            wait_for(lambda j=job_id: j in ran, timeout=10)
            time.sleep(0.05)  # acked before the next
    finally:
        running.stop()
    assert len(ran) == 3
    assert names == ["alkstore-claim_0"] * 3


def test_q26_with_a_handler_executor_the_loop_starts_the_handlers(
    database_url: URL, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executor's futures belong to the running loop: started there.
    names = _starting_threads(monkeypatch)
    ran: list[int] = []
    pool = ThreadPoolExecutor(2)
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker(
            {s.queue("early"): lambda job: ran.append(job.id)},
            poll_interval=60.0,
            handler_executor=pool,
        ),
    )
    try:
        job_id = store.queue("early").enqueue(b"x")
        wait_for(lambda: job_id in ran, timeout=10)
    finally:
        running.stop()
        pool.shutdown()
    assert names and all(name != "alkstore-claim_0" for name in names)
