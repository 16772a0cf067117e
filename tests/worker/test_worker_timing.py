"""The worker runtime's timing, on the fake backend and a virtual clock.

Each test runs a real ``Supervisor`` (producer, executor, heartbeats,
completer, shutdown) against ``tests/_fakebackend.py``: times below are
the loop's virtual seconds, exact and repeatable, and a test that "waits"
a 30 s grace takes milliseconds.  What the database itself does (the
claim statement, lapses, the Q28 transaction) is pinned end to end by the
other worker tests against PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable

import pytest

from alkstore_sa import FailJob, Job, QueueOpts, RetryJob
from alkstore_sa._calls.core import QueueCore
from alkstore_sa._values.stamps import backoff_bounds
from alkstore_sa.worker import _producer
from alkstore_sa.worker._handlers import inspect_handler
from alkstore_sa.worker._state import QueueBinding, RunState, wait_until
from alkstore_sa.worker._supervisor import Supervisor

from .. import _fakeclock
from .._fakebackend import FakeBackend, FakeDB, FakePort, bind, run_for, settings


def _run(test: object) -> None:
    _fakeclock.run(test)  # type: ignore[arg-type]


def sleeper(seconds: float, *, raises: BaseException | None = None):  # type: ignore[no-untyped-def]
    """A handler that takes ``seconds`` of (virtual) time, then returns or raises."""

    async def handler(job: Job) -> None:
        await asyncio.sleep(seconds)
        if raises is not None:
            raise raises

    return handler


# -- Q26: when the producer claims -------------------------------------------------


def test_q26_claims_once_listen_is_established_then_on_each_wake() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)  # there before the worker: found by the claim at LISTEN
        loop = asyncio.get_running_loop()
        loop.call_at(5.0, db.enqueue)  # notified: claimed at that very instant
        sup = Supervisor(settings(poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(0.1))], FakeBackend(listen_after=0.25), stop_at=6.0)
        assert db.times("claim") == [0.25, 5.0]
        assert not db.rows  # both acked

    _run(scenario())


def test_q26_repoll_claims_a_delayed_job_at_the_first_poll_after_it_is_due() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(delay=2.5)  # its notification comes before it is due
        sup = Supervisor(settings(poll_interval=1.0))
        await run_for(sup, [bind(db, sleeper(0.0))], FakeBackend(), stop_at=3.5)
        claims = [c for c in db.calls if c.op == "claim"]
        first_hit = next(c.at for c in claims if db.times("ack"))
        assert first_hit <= 3.0 + 0.002  # the poll at ~3.0 s found it
        assert not db.rows

    _run(scenario())


def test_b5_failed_claims_back_off_exponentially_not_a_busy_loop() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), fail_next={"claim": 3})
        db.enqueue(notify=False)
        sup = Supervisor(settings(poll_interval=0.5))
        await run_for(sup, [bind(db, sleeper(0.0))], FakeBackend(listen_after=0.0), stop_at=4.0)
        # Three failures, waits of 0.05 (a lone failure is retried at once), then
        # 0.5 and 1 s (poll_interval, doubling) after them, then the job.
        assert db.times("claim")[:4] == pytest.approx([0.0, 0.05, 0.55, 1.55], abs=0.001)
        assert not db.rows

    _run(scenario())


def test_b5_backoff_is_capped_at_30_s_and_wakes_do_not_cut_it_short() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), fail_next={"claim": 8})
        sup = Supervisor(settings(poll_interval=1.0))

        async def keep_waking() -> None:
            while True:
                await asyncio.sleep(0.25)
                db.enqueue()  # a notification every 250 ms while the claims fail

        waker = asyncio.get_running_loop().create_task(keep_waking())
        await run_for(sup, [bind(db, sleeper(0.0))], FakeBackend(listen_after=0.0), stop_at=200.0)
        waker.cancel()
        gaps = [b - a for a, b in itertools.pairwise(db.times("claim")[:9])]
        assert gaps == pytest.approx([0.05, 1, 2, 4, 8, 16, 30, 30], abs=0.01)

    _run(scenario())


def test_b5_listen_reestablished_ends_a_claim_backoff_at_once() -> None:
    """After an outage (a failover) the listener's reconnect says the database is
    back: the next claim goes then, not when the grown backoff would end."""

    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), fail_next={"claim": 6})
        db.enqueue(notify=False)
        sup = Supervisor(settings(poll_interval=1.0))
        backend = FakeBackend(listen_after=0.0, relisten_at=(20.0,))
        await run_for(sup, [bind(db, sleeper(0.0))], backend, stop_at=40.0)
        # Fails at 0, 0.05, 1.05, 3.05, 7.05, 15.05 (the next would be at 31.05);
        # LISTEN back at 20.
        expected = [0, 0.05, 1.05, 3.05, 7.05, 15.05, 20]
        assert db.times("claim")[:7] == pytest.approx(expected, abs=0.01)
        assert not db.rows  # the claim at 20 got the job

    _run(scenario())


def test_q26_a_backlog_is_refilled_in_claims_sized_to_the_free_slots() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        for _ in range(10):
            db.enqueue(notify=False)
        sup = Supervisor(settings(concurrency=4, poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(1.0))], FakeBackend(listen_after=0.0), stop_at=3.5)
        # Four at t=0; the batch finishes together at t=1, so four more, then the last two.
        sizes = [c.args[0] for c in db.calls if c.op == "claim"]
        assert sizes[:3] == [4, 4, 4] and db.times("claim")[:3] == [0.0, 1.0, 2.0]
        assert not db.rows

    _run(scenario())


def test_q26_a_backlog_slot_waits_about_one_claim_round_trip_for_company() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), claim_latency=0.02)
        slow = db.enqueue(notify=False)
        for _ in range(4):
            db.enqueue(notify=False)

        async def handler(job: Job) -> None:
            await asyncio.sleep(10.0 if job.id == slow else 1.0)

        sup = Supervisor(settings(concurrency=2, poll_interval=60.0))
        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=1.5)
        # A claim is logged when it reaches the database, 0.02 s after it is
        # sent.  t=0: a full claim of 2 (a backlog), back at 0.02.  At 1.02 one
        # slot frees while the slow job holds the other: it waits the moving
        # average of the claim's round trip (0.002 -> 0.0065 after one 0.02 s
        # claim), not the 9 s until every slot is free, then claims that one.
        claims = [(round(c.at, 4), c.args[0]) for c in db.calls if c.op == "claim"]
        assert claims[:2] == [(0.02, 2), (round(1.02 + 0.0065 + 0.02, 4), 1)]

    _run(scenario())


def test_o4_a_paused_queue_is_polled_not_spun_on_and_a_resume_claims_at_once() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, paused=True)
        db.enqueue(notify=False)
        loop.call_at(4.5, db.resume)
        sup = Supervisor(settings(poll_interval=2.0))
        await run_for(sup, [bind(db, sleeper(0))], FakeBackend(listen_after=0.0), stop_at=5.0)
        # Empty claims while paused: at LISTEN, then one per re-poll -- no spin.
        assert db.times("claim") == [0.0, 2.0, 4.0, 4.5]
        assert not db.rows  # the resume's notification claimed it at once

    _run(scenario())


# -- Q15/Q27: heartbeats --------------------------------------------------------------


def test_q27_heartbeats_every_third_of_the_visibility_timeout_while_the_handler_runs() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(visibility_timeout=3.0, notify=False)
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, sleeper(9.5))], FakeBackend(listen_after=0.0), stop_at=11.0)
        assert db.times("heartbeat") == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        assert db.times("ack") == [9.5] and not db.rows  # never lapsed: acked

    _run(scenario())


def test_q27_a_job_claimed_while_the_heartbeats_sleep_is_beaten_at_its_own_pace() -> None:
    """The heartbeats sleep until the first job's beat (t=10); a job claimed at t=2
    with a shorter visibility timeout moves that sleep's end (not a wake of the
    task: L1), and is beaten from t=3 on."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        db.enqueue(visibility_timeout=30.0, notify=False)
        loop.call_at(2.0, functools.partial(db.enqueue, visibility_timeout=3.0))
        sup = Supervisor(settings(poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(5.5))], FakeBackend(listen_after=0.0), stop_at=9.0)
        assert db.times("heartbeat") == [3.0, 4.0, 5.0, 6.0, 7.0]
        assert db.times("ack") == [5.5, 7.5] and not db.rows

    _run(scenario())


def test_q27_a_failed_heartbeat_is_retried_within_a_quarter_second() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), fail_next={"heartbeat": 1})
        db.enqueue(visibility_timeout=3.0, notify=False)
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, sleeper(2.5))], FakeBackend(listen_after=0.0), stop_at=3.0)
        assert db.times("heartbeat") == [1.0, 1.25, 2.25]
        assert not db.rows

    _run(scenario())


def test_q27_a_claim_found_gone_by_a_heartbeat_is_not_acked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        job_id = db.enqueue(visibility_timeout=3.0, notify=False)
        loop.call_at(0.5, db.reclaim, job_id)  # claimed by someone else while it runs
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, sleeper(2.0))], FakeBackend(listen_after=0.0), stop_at=3.0)
        assert db.times("heartbeat") == [1.0]  # found gone, never beaten again
        assert db.times("ack") == []
        messages = [r.getMessage() for r in caplog.records]
        assert f"job {job_id} on q (attempt 1/5): claim lost: while the handler ran; not acked" in (
            messages
        )

    _run(scenario())


# -- Q27: shutdown ------------------------------------------------------------------


def test_q27_stop_lets_in_flight_handlers_finish_within_the_grace_and_claims_nothing_new() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        first = db.enqueue(notify=False)
        sup = Supervisor(settings(concurrency=1, shutdown_timeout=30.0))
        bindings = [bind(db, sleeper(3.0))]
        asyncio.get_running_loop().call_at(2.0, db.enqueue)  # arrives while stopping
        returned = await run_for(sup, bindings, FakeBackend(listen_after=0.0), stop_at=1.0)
        assert returned == pytest.approx(3.0)
        assert db.times("claim") == [0.0] and first not in db.rows
        assert [r.job.status for r in db.rows.values()] == ["pending"]

    _run(scenario())


def test_q27_past_the_grace_running_jobs_are_released_attempt_kept() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        job_id = db.enqueue(notify=False)
        cancelled = asyncio.Event()

        async def stuck(job: Job) -> None:
            try:
                await asyncio.sleep(1000)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        sup = Supervisor(settings(shutdown_timeout=5.0))
        returned = await run_for(sup, [bind(db, stuck)], FakeBackend(listen_after=0.0), stop_at=1.0)
        assert returned == pytest.approx(6.0)  # stop at 1 + 5 s grace
        assert db.times("release") == [6.0]
        row = db.rows[job_id]
        assert (row.job.status, row.job.attempts, row.due) == ("pending", 1, 6.0)
        assert cancelled.is_set()  # an async handler is cancelled, not left running

    _run(scenario())


def test_q27_a_second_stop_releases_in_flight_jobs_at_once() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)
        sup = Supervisor(settings(shutdown_timeout=30.0))
        backend = FakeBackend(listen_after=0.0)
        returned = await run_for(
            sup, [bind(db, sleeper(1000))], backend, stop_at=1.0, second_stop_at=2.0
        )
        assert returned == pytest.approx(2.0)
        assert db.times("release") == [2.0]
        assert backend.closed

    _run(scenario())


def test_q27_stop_before_run_returns_at_once_and_claims_nothing() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)
        sup = Supervisor(settings())
        sup.stop()
        returned = await run_for(sup, [bind(db, sleeper(0))], FakeBackend(), stop_at=None)
        assert returned == 0.0 and db.times("claim") == []

    _run(scenario())


# -- Q27: job_timeout ---------------------------------------------------------------


def test_q27_job_timeout_retries_the_job_and_cancels_an_async_handler() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        job_id = db.enqueue(notify=False)
        sup = Supervisor(settings(job_timeout=2.0, poll_interval=60.0))
        # A retry due after the stop: the worker claims a retry when due (V5).
        later = QueueOpts(retry_base=60, retry_cap=60)
        binding = bind(db, sleeper(10.0), opts=later)
        await run_for(sup, [binding], FakeBackend(listen_after=0.0), stop_at=2.5)
        [retry] = [c for c in db.calls if c.op == "retry"]
        assert retry.at == 2.0 and retry.args[1] == "job timed out after 2 s"
        assert db.rows[job_id].job.status == "pending"

    _run(scenario())


def test_q27_a_timed_out_sync_handler_keeps_its_slot_until_it_returns() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)
        db.enqueue(notify=False)
        sup = Supervisor(settings(concurrency=1, job_timeout=2.0, poll_interval=0.5))
        # like_a_thread: the runtime cannot cancel it, so it runs its full 5 s.
        binding = bind(db, sleeper(5.0), like_a_thread=True)
        await run_for(sup, [binding], FakeBackend(listen_after=0.0), stop_at=5.2)
        # The second job waits for the slot: claimed at the poll after t=5, not at t=2.
        assert [t for t in db.times("claim") if t < 5.0] == [0.0]

    _run(scenario())


# -- what each handler ending records ---------------------------------------------------


@pytest.mark.parametrize(
    "raises, op, error, delay",
    [
        (FailJob("no such mailbox"), "fail", "no such mailbox", None),
        (RetryJob("later", delay=7), "retry", "later", 7.0),
        (RetryJob("bad delay", delay=-1), "retry", "bad delay", None),  # refused: the curve
        (KeyError("k"), "retry", "'k'", None),
        (RuntimeError(""), "retry", "RuntimeError", None),  # no text: the type's name
    ],
)
def test_q27_handler_outcome_is_recorded_once(
    raises: BaseException, op: str, error: str, delay: float | None
) -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)
        sup = Supervisor(settings(poll_interval=60.0))
        first = sleeper(0.5, raises=raises)

        async def handler(job: Job) -> object:
            if job.attempts > 1:  # a retry due at once runs at once (V5): past the stop here
                await asyncio.sleep(100.0)
            return await first(job)

        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=1.0)
        recorded = [c for c in db.calls if c.op in ("ack", "retry", "fail")]
        assert [(c.op, c.at, c.args[1]) for c in recorded] == [(op, 0.5, error)]
        if op == "retry" and delay is None:  # the queue's curve, drawn here so it can be logged
            low, high = backoff_bounds(QueueOpts(), 1)
            assert low <= recorded[0].args[2] <= high
        else:
            assert recorded[0].args[2] == delay

    _run(scenario())


def test_q27_acks_that_fail_are_retried_with_backoff_until_they_land() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), fail_next={"ack": 2})
        db.enqueue(visibility_timeout=30.0, notify=False)
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, sleeper(1.0))], FakeBackend(listen_after=0.0), stop_at=2.0)
        assert db.times("ack") == [1.0, 1.1, 1.3]  # 0.1 s, then 0.2 s later
        assert not db.rows

    _run(scenario())


# -- O7: sweeps -----------------------------------------------------------------------


def test_o7_each_queue_is_swept_at_start_and_then_every_sweep_interval() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        a, b = FakeDB(loop, queue="a"), FakeDB(loop, queue="b")
        expired = a.enqueue(notify=False, delay=1000)
        a.expired.add(expired)
        sup = Supervisor(settings(sweep_interval=60.0, poll_interval=30.0))
        bindings = [bind(a, sleeper(0)), bind(b, sleeper(0))]
        await run_for(sup, bindings, FakeBackend(), stop_at=130.0)
        assert a.times("sweep") == b.times("sweep") == [0.0, 60.0, 120.0]
        assert expired in a.dead

    _run(scenario())


def test_o7_no_sweeps_when_the_interval_is_none() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        sup = Supervisor(settings(sweep_interval=None))
        await run_for(sup, [bind(db, sleeper(0))], FakeBackend(), stop_at=500.0)
        assert db.times("sweep") == []

    _run(scenario())


def test_o7_a_failed_sweep_is_tried_again_next_interval_and_claims_go_on() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, fail_next={"sweep": 1})
        loop.call_at(5.0, db.enqueue)
        sup = Supervisor(settings(sweep_interval=10.0, poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(0))], FakeBackend(), stop_at=15.0)
        assert db.times("sweep") == [0.0, 10.0]
        assert 5.0 in db.times("claim") and not db.rows

    _run(scenario())


# -- D3: short handlers claim one batch ahead ----------------------------------------


def test_claim_ahead_short_handlers_claim_one_batch_ahead_so_claims_overlap_them() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), claim_latency=0.002)
        for _ in range(40):
            db.enqueue(notify=False)
        sup = Supervisor(settings(concurrency=4, poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(0.001))], FakeBackend(listen_after=0.0), stop_at=1.0)
        sizes = [c.args[0] for c in db.calls if c.op == "claim"]
        # The first claim fills the free slots; once handlers are known to be
        # short, each claim also takes the next batch (4 running + 4 ahead).
        assert sizes[0] == 4 and 8 in sizes
        assert not db.rows  # every job ran and was acked

    _run(scenario())


def test_claim_ahead_long_handlers_never_claim_ahead() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        for _ in range(12):
            db.enqueue(notify=False)
        sup = Supervisor(settings(concurrency=4, poll_interval=60.0))
        await run_for(sup, [bind(db, sleeper(0.5))], FakeBackend(listen_after=0.0), stop_at=2.0)
        assert [c.args[0] for c in db.calls if c.op == "claim"][:3] == [4, 4, 4]
        assert not db.rows

    _run(scenario())


def test_q27_claim_ahead_jobs_claimed_ahead_go_back_at_stop_without_running() -> None:
    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        for _ in range(200):
            db.enqueue(notify=False)
        ran: list[int] = []

        async def handler(job: Job) -> None:
            ran.append(job.id)
            await asyncio.sleep(0.001)

        sup = Supervisor(settings(concurrency=4, poll_interval=60.0, shutdown_timeout=5.0))
        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=0.02)
        released = {c.args[0][0] for c in db.calls if c.op == "release"}
        assert released  # some were waiting in ready when the stop came
        assert released.isdisjoint(ran)  # ... and none of them ran
        acked = {claim[0] for c in db.calls if c.op == "ack" for claim in c.args}
        assert acked == set(ran)  # everything that ran was acked
        assert not [r for r in db.rows.values() if r.job.status == "processing"]

    _run(scenario())


def test_run_returns_when_a_cancelled_part_hides_its_cancellation_in_another_error() -> None:
    """A shutdown cancels the run's parts; an async database call cancelled half way
    may end in another error.  The part must still end (it did not: the vacuum loop
    logged the error and went on, and run() waited for it forever)."""

    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), vacuum_hangs=True)
        sup = Supervisor(settings(vacuum_interval=0.5))
        returned = await run_for(sup, [bind(db, sleeper(0.0))], FakeBackend(), stop_at=1.0)
        assert returned < 2.0 and db.times("vacuum")[0] == 0.0

    _run(scenario())


def test_claim_ahead_claims_ahead_in_whole_batches_when_handlers_end_one_by_one() -> None:
    """Handlers of staggered lengths free their slots one at a time; jobs waiting
    in ready fill each at once, so the producer sends the next claim only when
    that batch has all started: whole batches, not a claim per freed slot."""

    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop(), claim_latency=0.002)
        first = db.enqueue(notify=False)
        for _ in range(199):
            db.enqueue(notify=False)

        async def handler(job: Job) -> None:
            # By position, not id: ids run on across tests (one counter).
            await asyncio.sleep(0.0005 + ((job.id - first) % 7) * 0.0003)

        sup = Supervisor(settings(concurrency=8, poll_interval=60.0))
        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=1.0)
        sizes = [c.args[0] for c in db.calls if c.op == "claim"]
        # Past the first claims (slots freeing while one is in flight), only
        # whole batches of one concurrency's worth go out.
        assert sizes[0] == 8 and sizes[3:] == [8] * (len(sizes) - 3)
        assert not db.rows

    _run(scenario())


# -- B5: the recovery tail -- the first success after failures ends every backoff ----------


def test_b5_the_first_success_elsewhere_ends_a_grown_claim_backoff_at_once() -> None:
    """A heartbeat that lands after a run of failed claims says the database
    answers again: the next claim goes then (and backs off from its floor),
    not when the backoff grown during the fault would end."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        db.enqueue(notify=False, visibility_timeout=30.0)  # held 25 s: heartbeated at 10

        def fault() -> None:
            db.fail_next["claim"] = 6
            db.enqueue()  # its wake's claim fails, and the next five

        loop.call_at(0.5, fault)
        sup = Supervisor(settings(poll_interval=1.0))
        await run_for(sup, [bind(db, sleeper(25.0))], FakeBackend(listen_after=0.0), stop_at=12.0)
        assert db.times("heartbeat")[:1] == pytest.approx([10.0], abs=0.01)
        # Fails at 0.5, 0.55, 1.55, 3.55, 7.55 (the next due at 15.55); the
        # heartbeat at 10 cuts it: a claim at 10 (the sixth failure), then after
        # the floor -- 0.05 s, a first failure's again, not 16 s -- the claim
        # that gets the job.
        claims = db.times("claim")
        expected = [0.0, 0.5, 0.55, 1.55, 3.55, 7.55, 10.0, 10.05]
        assert claims[:8] == pytest.approx(expected, abs=0.01)
        assert len([c for c in db.calls if c.op == "ack"]) == 2

    _run(scenario())


def test_b5_an_ack_retry_wait_ends_when_another_call_lands() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, fail_next={"ack": 8})
        db.enqueue(notify=False, visibility_timeout=30.0)
        db.enqueue(notify=False, visibility_timeout=30.0)

        async def handler(job: Job) -> None:
            await asyncio.sleep(1.0 if job.id % 2 else 25.0)  # one short, one held 25 s

        sup = Supervisor(settings(poll_interval=60.0))
        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=12.0)
        # 0.1, 0.2, 0.4, 0.8, 1.6 then 2 s (the cap) apart; the heartbeat at 10
        # lands and the wait due to end at 10.1 ends then.
        acks = db.times("ack")
        expected = [1.0, 1.1, 1.3, 1.7, 2.5, 4.1, 6.1, 8.1, 10.0]
        assert acks[: len(expected)] == pytest.approx(expected, abs=0.01)

    _run(scenario())


def test_b5_a_claim_backoff_is_cut_at_most_once_a_poll_interval() -> None:
    """Claims that keep failing while other calls keep landing poll at their floor;
    they never spin on the others' successes."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        db.enqueue(notify=False, visibility_timeout=1.41)  # heartbeated every 0.47 s

        def fault() -> None:
            db.fail_next["claim"] = 1_000
            db.enqueue()

        # Beats every 0.47 s, so no cut (at a beat, at most once every 2 s)
        # falls on the instant of another beat or of the fault: the order of
        # two answers at one instant is the loop's, not the rule's.
        loop.call_at(0.6, fault)
        sup = Supervisor(settings(poll_interval=2.0, shutdown_timeout=0.0))
        await run_for(sup, [bind(db, sleeper(20.0))], FakeBackend(listen_after=0.0), stop_at=12.0)
        # The wake's claim fails at 0.6, its quick retry at 0.65; the beat at
        # 0.94 cuts the backoff (a claim then, and its retry), and from there on
        # the cuts keep the 2 s floor: two claims a poll interval, no spin.
        claims = [t for t in db.times("claim") if t < 12.0]
        expected = [0.0, 0.6, 0.65, 0.94, 0.99]
        expected += [at + d for at in (2.94, 4.94, 6.94, 8.94, 10.94) for d in (0.0, 0.05)]
        assert claims == pytest.approx(expected, abs=0.01)

    _run(scenario())


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel a listener's run and see it end by that cancellation."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_b5_the_listener_backoff_ends_when_the_database_answers_other_calls() -> None:
    """Connects failing in a row back off (0.05 .. 3.2 s); when the worker's other
    calls get through again (``RunState.database_answered``) the wait under way
    ends, the listener connects at once, and its next wait starts from the floor
    (then grows again while only its own connects fail)."""
    from alkstore_sa.worker import _listener

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        attempts: list[float] = []
        run = RunState(settings=settings(), queues=[], loop=loop)

        class Refused(_listener._ListenLoop):
            async def _listen_once(self) -> None:
                attempts.append(round(loop.time(), 6))
                if len(attempts) >= 8:
                    await asyncio.sleep(0.02)  # a connect that takes a while to fail
                if len(attempts) == 10:
                    await asyncio.Event().wait()  # connected, listening
                raise ConnectionError("the database system is starting up")

            async def _close(self) -> None:
                return None

        task = loop.create_task(Refused(["c"], lambda c: None, lambda up: None, run).run())
        await asyncio.sleep(3.3)  # the 7th attempt failed at 3.15: waiting 3.2 s
        run.database_answered()  # a claim got through: the wait ends now
        await asyncio.sleep(5.0)
        await _cancelled(task)
        return attempts

    attempts = _fakeclock.run(scenario())
    assert attempts[:7] == pytest.approx([0.0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15], abs=0.002)
    # Woken at 3.3 (not at 6.35); that attempt fails at 3.32 and the next wait
    # is the floor's 0.05 (not 6.4 s): 3.37; then 0.1 again, own failures only.
    assert attempts[7:] == pytest.approx([3.3, 3.37, 3.49], abs=0.002)


def test_b5_the_listener_reconnects_from_its_floor_after_an_established_listen() -> None:
    """Connects that fail back off (0.05, 0.1, 0.2 s); LISTEN established and then
    lost again reconnects after the floor, not after the grown wait."""
    from alkstore_sa.worker import _listener

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        attempts: list[float] = []

        class Flaky(_listener._ListenLoop):
            async def _listen_once(self) -> None:
                attempts.append(round(loop.time(), 6))
                if len(attempts) in (4, 5):  # LISTEN established, then the backend is killed
                    self._established_now()
                    await asyncio.sleep(0.01)
                if len(attempts) >= 6:
                    await asyncio.Event().wait()
                raise ConnectionError("terminating connection due to administrator command")

            async def _close(self) -> None:
                return None

        listener = Flaky(["c"], lambda c: None, lambda up: None, _listener.NO_RECOVERY)
        task = loop.create_task(listener.run())
        await asyncio.sleep(5.0)
        await _cancelled(task)
        return attempts

    attempts = _fakeclock.run(scenario())
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(attempts)]
    # 3 failed connects (0.05, 0.1, 0.2), then 0.4 before the 4th; each
    # established LISTEN lost after 10 ms is back after the floor (0.05).
    assert gaps == pytest.approx([0.05, 0.1, 0.2, 0.01 + 0.05, 0.01 + 0.05], abs=0.002)


class _SilentClaimPort(FakePort):
    """The first claim hangs as on a silent peer; ``abort_claim`` ends it only
    when ``abort_ends`` (breaking the socket), else it hangs on regardless."""

    def __init__(self, db: FakeDB, *, abort_ends: bool) -> None:
        super().__init__(db, sleeper(0.0))
        self.started: list[float] = []
        self.aborted: list[float] = []
        self._abort_ends = abort_ends
        self._hung: asyncio.Future[None] | None = None

    async def claim(
        self,
        worker_id: str,
        n: int,
        max_batch_payload_bytes: int | None = None,
        *,
        on_reply: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        loop = asyncio.get_running_loop()
        self.started.append(loop.time())
        if len(self.started) == 1:
            self._hung = loop.create_future()
            await self._hung  # a reply that never comes
        return await super().claim(worker_id, n, max_batch_payload_bytes, on_reply=on_reply)

    def abort_claim(self) -> None:
        self.aborted.append(asyncio.get_running_loop().time())
        if self._abort_ends and self._hung is not None and not self._hung.done():
            self._hung.set_exception(ConnectionError("socket shut down"))


@pytest.mark.parametrize("abort_ends", [True, False], ids=["abort-ends-it", "abort-ignored"])
def test_b5_a_claim_with_no_reply_is_abandoned_and_claims_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, abort_ends: bool
) -> None:
    """Past CLAIM_TIMEOUT the claim's connection is broken; if even that does not
    end it, it is cancelled ABORT_WAIT later.  Either way it is a failed claim
    (retried at the backoff's floor) and the job runs."""
    monkeypatch.setattr(_producer, "CLAIM_TIMEOUT", 1.0)
    monkeypatch.setattr(_producer, "ABORT_WAIT", 0.5)

    async def scenario() -> None:
        db = FakeDB(asyncio.get_running_loop())
        db.enqueue(notify=False)
        port = _SilentClaimPort(db, abort_ends=abort_ends)
        handler = inspect_handler(sleeper(0.0), "test")
        binding = QueueBinding(QueueCore("alkstore", db.queue, None), handler, port)
        sup = Supervisor(settings(poll_interval=10.0))
        with caplog.at_level(logging.WARNING, logger="alkstore_sa.worker"):
            await run_for(sup, [binding], FakeBackend(listen_after=0.0), stop_at=3.0)
        ended = 1.0 if abort_ends else 1.5
        assert port.aborted == pytest.approx([1.0], abs=0.001)
        assert port.started[:2] == pytest.approx([0.0, ended + 0.05], abs=0.001)
        assert "no reply within 1s; connection dropped" in caplog.text
        assert not db.rows  # the retry claimed it and it ran

    _run(scenario())


# -- L1: the wake path's loop passes ---------------------------------------------------


def test_l1_a_set_event_reaches_the_waiter_in_one_loop_pass() -> None:
    """The producer's idle wait (``wait_until``): a ``set()`` resumes the waiter
    on the loop's next pass, not two later as a wait in a task of its own
    (``asyncio.wait_for`` before Python 3.12) would."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        resumed: list[int] = []
        passes = 0

        async def waiter() -> None:
            await wait_until(event, loop.time() + 60.0)
            resumed.append(passes)

        task = loop.create_task(waiter())
        await asyncio.sleep(0)  # the waiter is now waiting
        event.set()
        while not resumed:
            await asyncio.sleep(0)  # one pass of the loop
            passes += 1
        await task
        assert resumed == [0]  # it ran before this task's first pass after set() ended

    _run(scenario())


def test_l1_wait_until_returns_at_its_deadline_when_nothing_is_set() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        await wait_until(event, 7.5)
        assert loop.time() == 7.5 and not event.is_set()

    _run(scenario())
