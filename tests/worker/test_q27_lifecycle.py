"""Q27: heartbeats keep a slow job single, graceful stop, the shutdown grace."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, AsyncWorker, Job, QueueOpts, Store, Worker

from .._workers import KINDS, handler, start_worker, stuck_handler, wait_for, worker_class


def _slow(kind: str, seconds: float, calls: list[Job], started: threading.Event) -> Any:
    """A handler that records its call and takes ``seconds`` (sync or async)."""
    if kind == "sync":

        def slow(job: Job) -> None:
            calls.append(job)
            started.set()
            time.sleep(seconds)

        return slow

    async def aslow(job: Job) -> None:
        calls.append(job)
        started.set()
        await asyncio.sleep(seconds)

    return aslow


@pytest.mark.parametrize("kind", KINDS)
def test_q27_heartbeats_keep_a_slow_job_from_a_competing_worker(
    kind: str, database_url: URL, store: Store
) -> None:
    # Visibility 1.2 s, handler 3 s: without heartbeats the claim lapses twice
    # over and the competitor (re-polling every 50 ms) runs it again.  A beat
    # comes every 0.4 s, so a loaded machine has 0.8 s of slack before a lapse.
    opts = QueueOpts(visibility_timeout=1.2)
    calls: list[Job] = []
    started = threading.Event()
    workers = [
        start_worker(
            kind,
            database_url,
            lambda s: worker_class(kind)(
                {s.queue("slow", opts): _slow(kind, 3.0, calls, started)}, poll_interval=0.05
            ),
        )
        for _ in range(2)
    ]
    q = store.queue("slow", opts)
    try:
        job_id = q.enqueue(b"")
        wait_for(lambda: q.get_job(job_id) is None, timeout=10)
        time.sleep(0.3)  # a double run would show up here
    finally:
        for w in workers:
            w.stop()
    assert [(j.id, j.attempts) for j in calls] == [(job_id, 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_q27_stop_finishes_in_flight_work_and_claims_nothing_new(
    kind: str, database_url: URL, store: Store
) -> None:
    calls: list[Job] = []
    started = threading.Event()
    q = store.queue("drain")
    first, *rest = q.enqueue_many([b"1", b"2", b"3"])
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("drain"): _slow(kind, 0.5, calls, started)}, concurrency=1, poll_interval=0.05
        ),
    )
    assert started.wait(10)
    took = running.stop()
    assert took < 5
    assert [j.id for j in calls] == [first]
    assert q.get_job(first) is None  # finished and acked before run() returned
    for job_id in rest:  # never claimed
        job = q.get_job(job_id)
        assert job is not None and (job.status, job.attempts) == ("pending", 0)


@pytest.mark.parametrize("kind", KINDS)
def test_q27_past_shutdown_timeout_the_job_is_released_attempt_kept(
    kind: str, database_url: URL, store: Store
) -> None:
    release = threading.Event()
    started = threading.Event()
    fn = stuck_handler(kind, started, release)
    q = store.queue("stuck")
    job_id = q.enqueue(b"")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("stuck"): fn}, shutdown_timeout=0.3, poll_interval=0.05
        ),
    )
    try:
        assert started.wait(10)
        took = running.stop()
    finally:
        release.set()
    assert 0.3 <= took < 3
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.worker_id, job.claim_deadline) == (
        "pending",
        1,
        None,
        None,
    )
    again = q.claim_one("next")  # due now: the next worker gets it at once
    assert again is not None and again.id == job_id and again.job.attempts == 2


@pytest.mark.parametrize("kind", KINDS)
def test_q27_past_shutdown_timeout_a_job_on_its_last_attempt_is_dead_lettered(
    kind: str, database_url: URL, store: Store
) -> None:
    # Released, it would run a max_attempts+1-th time: like a worker dying
    # after its last claim (Q12), it dead-letters instead.
    opts = QueueOpts(max_attempts=1)
    release = threading.Event()
    started = threading.Event()
    fn = stuck_handler(kind, started, release)
    q = store.queue("last", opts)
    job_id = q.enqueue(b"")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("last", opts): fn}, shutdown_timeout=0.3, poll_interval=0.05
        ),
    )
    try:
        assert started.wait(10)
        running.stop()
    finally:
        release.set()
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.last_error) == ("dead", 1, "max attempts exceeded")
    assert q.claim_one("next") is None


def test_q27_cancelling_async_run_releases_held_jobs_and_cancels_handlers(
    database_url: URL, store: Store
) -> None:
    q = store.queue("cancelled_run")
    job_id = q.enqueue(b"")
    handler_cancelled: list[int] = []
    outcome: dict[str, Any] = {}

    async def main() -> None:
        aengine = create_async_engine(database_url)
        started = asyncio.Event()

        async def ahandler(job: Job) -> None:
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                handler_cancelled.append(job.id)
                raise

        worker = AsyncWorker(
            {AsyncStore(aengine).queue("cancelled_run"): ahandler},
            shutdown_timeout=30,
            poll_interval=0.05,
            handle_signals=False,
        )
        run = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(started.wait(), 10)
            began = time.monotonic()
            run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                outcome["cancelled"] = True
            outcome["took"] = time.monotonic() - began
            outcome["handlers_cancelled"] = list(handler_cancelled)
        finally:
            await aengine.dispose()

    asyncio.run(main())
    assert outcome["cancelled"] and outcome["took"] < 3  # not the 30 s grace
    assert outcome["handlers_cancelled"] == [job_id]  # no handler task outlives run()
    job = q.get_job(job_id)
    assert job is not None  # back at once, not when the lease lapses; attempt kept
    assert (job.status, job.attempts, job.worker_id) == ("pending", 1, None)


def test_q27_interrupting_sync_run_releases_held_jobs(database_url: URL, store: Store) -> None:
    # Ctrl-C with handle_signals=False: asyncio.run turns SIGINT into a
    # cancellation of the run, and run() raises KeyboardInterrupt.
    assert threading.current_thread() is threading.main_thread()  # SIGINT goes there
    q = store.queue("interrupted_run")
    job_id = q.enqueue(b"")
    started = threading.Event()
    release = threading.Event()
    engine = create_engine(database_url)
    worker = Worker(
        {Store(engine).queue("interrupted_run"): stuck_handler("sync", started, release)},
        shutdown_timeout=30,
        poll_interval=0.05,
        handle_signals=False,
    )
    sent: list[float] = []

    def interrupt() -> None:
        if started.wait(10):
            sent.append(time.monotonic())
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run()
        took = time.monotonic() - sent[0]
    finally:
        release.set()
        engine.dispose()
    assert took < 3
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.worker_id) == ("pending", 1, None)


@pytest.mark.parametrize("kind", KINDS)
def test_q27_shutdown_timeout_bounds_a_handler_whose_claim_was_lost(
    kind: str, database_url: URL, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    opts = QueueOpts(visibility_timeout=0.6)  # heartbeat every 0.2 s
    q = store.queue("lost_then_stop", opts)
    job_id = q.enqueue(b"")
    release = threading.Event()

    def lose(job: Job) -> None:
        # Claimed again elsewhere while it runs (a cancel would stop it: C1).
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE alkstore.jobs SET attempts = attempts + 1 WHERE id = :id"),
                {"id": job.id},
            )

    if kind == "sync":

        def hang(job: Job) -> None:
            lose(job)
            release.wait(10)

        fn: Any = hang
    else:

        async def ahang(job: Job) -> None:
            lose(job)
            await asyncio.sleep(10)

        fn = ahang
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("lost_then_stop", opts): fn}, shutdown_timeout=0.5, poll_interval=0.05
        ),
    )
    try:
        wait_for(
            lambda: any(
                r.getMessage().startswith(
                    f"job {job_id} on lost_then_stop: heartbeat found its claim gone"
                )
                for r in caplog.records
            )
        )
        took = running.stop()
    finally:
        release.set()
    assert 0.5 <= took < 2  # the grace, not the grace plus a 10 s release wait


@pytest.mark.parametrize("kind", KINDS)
def test_q27_stop_before_run_survives_a_concurrency_override(
    kind: str, database_url: URL, store: Store
) -> None:
    # ``alkstore worker --concurrency`` rebuilds the runtime of a worker built
    # elsewhere; a stop() asked for before that must still make run() return.
    q = store.queue("stopped_early")
    job_id = q.enqueue(b"")
    ran: list[Job] = []

    def build(s: Any) -> Any:
        worker = worker_class(kind)({s.queue("stopped_early"): handler(kind, ran.append)})
        worker.stop()
        worker._override_concurrency(2)
        return worker

    running = start_worker(kind, database_url, build)
    running.join(timeout=5)
    assert ran == []
    job = q.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 0)
