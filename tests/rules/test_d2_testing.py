"""D2: ``alkstore_sa.testing`` -- run_due and enqueued, on both faces (and drivers).

Each outcome is checked against the database, the way the worker's own
rule tests check it (tests/worker/test_q27_outcomes.py): the row acked, retried
on the curve, dead-lettered, a session handler's write committed with the
ack or rolled back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine, func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import (
    AsyncStore,
    AsyncWorker,
    EnqueueOpts,
    FailJob,
    Job,
    QueueOpts,
    RetryJob,
    Store,
    Tasks,
    Worker,
)
from alkstore_sa._values.stamps import backoff_bounds
from alkstore_sa.testing import WORKER_ID, RunReport, enqueued, run_due

from .. import _api, _drivers

INSERT = text("INSERT INTO receipts (job_id) VALUES (:job_id)")


class Face:
    """One face under test: its store, and run_due/enqueued called as a test would."""

    def __init__(self, kind: str, store: Any, loop: _api.LoopThread | None) -> None:
        self.kind = kind
        self.store = store
        self._loop = loop

    @property
    def is_async(self) -> bool:
        return self._loop is not None

    def _wait(self, value: Any) -> Any:
        return self._loop.run(value) if self._loop is not None else value

    def run_due(self, target: Any, **kw: Any) -> RunReport:
        report = self._wait(run_due(target, **kw))
        assert isinstance(report, RunReport)
        return report

    def enqueued(self, queue: Any) -> list[Job]:
        return list(self._wait(enqueued(queue)))

    def handler(self, fn: Callable[[Job], Any]) -> Any:
        """``fn`` as a handler of this face (an async wrapper on the async one)."""
        if not self.is_async:
            return fn

        async def handle(job: Job) -> Any:
            return fn(job)

        return handle

    def session_handler(self, after: Callable[[Job], Any]) -> Any:
        if not self.is_async:

            def charge(job: Job, session: Any) -> None:
                session.execute(INSERT, {"job_id": job.id})
                after(job)

            return charge

        async def acharge(job: Job, session: Any) -> None:
            await session.execute(INSERT, {"job_id": job.id})
            after(job)

        return acharge

    def worker(self, handlers: dict[Any, Any]) -> Worker | AsyncWorker:
        return (AsyncWorker if self.is_async else Worker)(handlers)


@pytest.fixture(params=["sync", *_drivers.ASYNC_FACES])
def face(request: pytest.FixtureRequest, database_url: URL, engine: Engine) -> Iterator[Face]:
    if request.param == "sync":
        with Store(engine) as s:
            yield Face("sync", s, None)
        return
    loop = _api.LoopThread()
    aengine = create_async_engine(_drivers.async_url(database_url, request.param))
    astore = AsyncStore(aengine)
    try:
        yield Face(request.param, astore, loop)
    finally:
        loop.run(aengine.dispose())
        loop.stop()


def _ok(job: Job) -> None:
    return None


def _db_now(store: Store) -> dt.datetime:
    with store.engine.connect() as conn:
        now = conn.execute(select(func.now())).scalar_one()
    assert isinstance(now, dt.datetime)
    return now


def test_d2_run_due_acks_what_returns_in_claim_order(face: Face, store: Store) -> None:
    q = store.queue("d2")
    ids = q.enqueue_many([b"a", b"b", b"c"])
    later = q.enqueue(b"not due", EnqueueOpts(delay=60))
    seen: list[bytes] = []

    report = face.run_due(
        face.store.queue("d2"), handler=face.handler(lambda j: seen.append(j.payload))
    )

    assert report.acked == ids and report.retried == report.dead == report.lost == []
    assert report.runs == 3 and seen == [b"a", b"b", b"c"]
    assert all(q.get_job(i) is None for i in ids)
    assert q.get_job(later).status == "pending"  # type: ignore[union-attr]
    # Nothing due: nothing runs.
    assert face.run_due(face.store.queue("d2"), handler=face.handler(_ok)) == RunReport()


def test_d2_failjob_dead_letters_and_exception_retries_on_the_curve(
    face: Face, store: Store
) -> None:
    opts = QueueOpts(retry_base=30, max_attempts=5)
    q = store.queue("d2-out", opts)
    doomed, flaky = q.enqueue_many([b"doomed", b"flaky"])

    def body(job: Job) -> None:
        if job.payload == b"doomed":
            raise FailJob("no such account")
        raise ValueError("smtp down")

    before = _db_now(store)
    report = face.run_due(face.store.queue("d2-out", opts), handler=face.handler(body))
    after = _db_now(store)

    assert report.dead == [doomed] and report.retried == [flaky] and report.acked == []
    assert isinstance(report.errors[doomed], FailJob)
    assert isinstance(report.errors[flaky], ValueError)
    dead = q.get_job(doomed)
    assert dead is not None and dead.status == "dead" and dead.last_error == "no such account"
    retried = q.get_job(flaky)
    assert retried is not None and retried.status == "pending" and retried.attempts == 1
    assert retried.last_error == "smtp down" and retried.worker_id is None
    low, high = backoff_bounds(opts, 1)  # the worker's own curve (Q17)
    assert before + dt.timedelta(seconds=low) <= retried.run_at
    assert retried.run_at <= after + dt.timedelta(seconds=high)


def test_d2_retryjob_delay_and_the_last_attempt_dead_letters(face: Face, store: Store) -> None:
    opts = QueueOpts(max_attempts=3)
    q = store.queue("d2-retry", opts)
    again, later = q.enqueue_many([b"again", b"later"])

    def body(job: Job) -> None:
        raise RetryJob("not yet", delay=0 if job.payload == b"again" else 600)

    report = face.run_due(face.store.queue("d2-retry", opts), handler=face.handler(body))

    # delay=0: due again at once, so run again in the same call until its
    # attempts ran out (Q18); delay=600: retried once, then not due.
    assert report.retried == [again, later, again] or report.retried == [again, again, later]
    assert report.dead == [again]
    dead = q.get_job(again)
    assert dead is not None and dead.status == "dead" and dead.attempts == 3
    pending = q.get_job(later)
    assert pending is not None and pending.status == "pending" and pending.attempts == 1


def test_d2_limit_stops_after_that_many_runs(face: Face, store: Store) -> None:
    q = store.queue("d2-limit")
    ids = q.enqueue_many([b""] * 5)
    report = face.run_due(face.store.queue("d2-limit"), handler=face.handler(_ok), limit=2)
    assert report.acked == ids[:2]
    assert [j.id for j in face.enqueued(face.store.queue("d2-limit"))] == ids[2:]
    assert face.run_due(face.store.queue("d2-limit"), handler=face.handler(_ok), limit=0).runs == 0


@pytest.fixture
def receipts(store: Store) -> Store:
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE receipts (job_id bigint PRIMARY KEY)"))
    return store


def _receipts(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(text("SELECT job_id FROM receipts")))


def test_d2_session_handler_writes_commit_with_the_ack_or_roll_back(
    face: Face, receipts: Store
) -> None:
    # retry_base=2: the first retry waits 1-2 s, so it is not due again at
    # once (with the default 1 it may be, and would then run again here).
    opts = QueueOpts(retry_base=2)
    q = receipts.queue("d2-session", opts)
    good, bad = q.enqueue_many([b"good", b"bad"])

    def after(job: Job) -> None:
        if job.payload == b"bad":
            raise RuntimeError("after the write")

    report = face.run_due(face.store.queue("d2-session", opts), handler=face.session_handler(after))

    assert report.acked == [good] and report.retried == [bad]
    assert _receipts(receipts) == [good]  # the failed run's write rolled back (Q28)
    assert q.get_job(good) is None
    assert q.get_job(bad).last_error == "after the write"  # type: ignore[union-attr]


def test_d2_run_due_runs_a_workers_queues_with_their_handlers(face: Face, store: Store) -> None:
    mails = store.queue("d2-mail").enqueue_many([b"m1", b"m2"])
    bills = store.queue("d2-bill").enqueue_many([b"b1"])
    seen: list[tuple[str, bytes]] = []
    worker = face.worker(
        {
            face.store.queue("d2-mail"): face.handler(lambda j: seen.append(("mail", j.payload))),
            face.store.queue("d2-bill"): face.handler(lambda j: seen.append(("bill", j.payload))),
        }
    )
    report = face.run_due(worker)
    assert sorted(report.acked) == sorted(mails + bills)
    assert sorted(seen) == [("bill", b"b1"), ("mail", b"m1"), ("mail", b"m2")]


def test_d2_t2_run_due_runs_a_tasks_registry_by_task_name(face: Face, store: Store) -> None:
    tasks: Any = Tasks(face.store)
    seen: list[int] = []

    def receipt_body(order_id: int) -> None:
        seen.append(order_id)

    def refund_body(order_id: int) -> None:
        raise FailJob(f"no refund for {order_id}")

    if face.is_async:

        async def receipt(order_id: int) -> None:
            receipt_body(order_id)

        async def refund(order_id: int) -> None:
            refund_body(order_id)

    else:
        receipt, refund = receipt_body, refund_body
    send = tasks.task(queue="d2-tasks", name="receipt")(receipt)
    give = tasks.task(queue="d2-refunds", name="refund")(refund)
    sent = face._wait(send.defer(order_id=42))
    refused = face._wait(give.defer(order_id=7))

    report = face.run_due(tasks)
    assert report.acked == [sent] and report.dead == [refused] and seen == [42]
    assert store.queue("d2-refunds").get_job(refused).last_error == "no refund for 7"  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="its own tasks"):
        run_due(tasks, handler=_ok)


def test_d2_a_handler_that_enqueues_due_work_sees_it_run_in_the_same_call(
    face: Face, store: Store
) -> None:
    first = store.queue("d2-chain").enqueue(b"1")
    made: list[int] = []

    def body(job: Job) -> None:
        if job.payload == b"1":
            made.append(store.queue("d2-chain").enqueue(b"2"))

    report = face.run_due(face.store.queue("d2-chain"), handler=face.handler(body))
    assert report.acked == [first, *made]


def test_d2_enqueued_lists_pending_jobs_oldest_first(face: Face, store: Store) -> None:
    q = store.queue("d2-list")
    ids = q.enqueue_many([b"1", b"2", b"3", b"4"])
    scheduled = q.enqueue(b"later", EnqueueOpts(delay=60))
    [claimed] = q.claim_batch("w", 1)
    assert claimed.id == ids[0]
    q.claim_batch("w", 1)[0].fail("gone")  # ids[1] dead
    listed = face.enqueued(face.store.queue("d2-list"))
    assert [j.id for j in listed] == [ids[2], ids[3], scheduled]
    assert all(j.status == "pending" for j in listed) and listed[0].payload == b"3"
    assert face.enqueued(face.store.queue("d2-empty")) == []


def test_d2_the_worker_id_is_alkstore_testing(face: Face, store: Store) -> None:
    job_id = store.queue("d2-who").enqueue(b"")
    seen: list[str | None] = []
    face.run_due(
        face.store.queue("d2-who"), handler=face.handler(lambda j: seen.append(j.worker_id))
    )
    assert seen == [WORKER_ID] and store.queue("d2-who").get_job(job_id) is None


def test_d2_wrong_targets_are_refused_before_any_claim(store: Store) -> None:
    q = store.queue("d2-bad")
    job_id = q.enqueue(b"")
    with pytest.raises(TypeError, match="needs handler="):
        run_due(q)
    with pytest.raises(TypeError, match="brings its own handlers"):
        run_due(Worker({q: _ok}), handler=_ok)

    async def ahandler(job: Job) -> None:
        return None

    with pytest.raises(TypeError, match="is async"):
        run_due(q, handler=ahandler)
    with pytest.raises(TypeError, match="takes a Queue"):
        run_due("d2-bad", handler=_ok)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="limit"):
        run_due(q, handler=_ok, limit=-1)
    with pytest.raises(TypeError, match="handler"):
        run_due(q, handler=lambda: None)
    assert q.get_job(job_id).status == "pending"  # type: ignore[union-attr]


async def test_d2_async_run_due_is_awaited_on_the_callers_loop(async_engine: Any) -> None:
    """The async variant: a coroutine run on the caller's loop (its handler sees that loop)."""
    astore = AsyncStore(async_engine)
    q = astore.queue("d2-loop")
    job_id = await q.enqueue(b"")
    loops: list[asyncio.AbstractEventLoop] = []

    async def body(job: Job) -> None:
        loops.append(asyncio.get_running_loop())

    pending = run_due(q, handler=body)
    assert asyncio.iscoroutine(pending)
    report = await pending
    assert report.acked == [job_id] and loops == [asyncio.get_running_loop()]
    assert await enqueued(q) == []


def test_d2_sync_handlers_run_in_the_calling_thread(store: Store) -> None:
    """The worker's executor drives them, inline: thread-local state set up by a test holds."""
    q = store.queue("d2-thread")
    job_id = q.enqueue(b"")
    threads: list[threading.Thread] = []
    report = run_due(q, handler=lambda job: threads.append(threading.current_thread()))
    assert report.acked == [job_id] and threads == [threading.current_thread()]


async def test_d2_sync_run_due_called_from_a_running_loop_still_runs(store: Store) -> None:
    """A sync target called inside a coroutine: its loop is busy, so a thread of its own."""
    q = store.queue("d2-in-loop")
    job_id = q.enqueue(b"")
    report = run_due(q, handler=_ok)
    assert report.acked == [job_id] and enqueued(q) == []
