"""Q27: a claim still in flight when the stop comes -- its jobs go back, none starts.

On the fake backend and a virtual clock (``test_worker_timing.py``'s
harness): the claim's statement takes ``claim_latency`` and takes its rows
at the end of it, so a stop or a cancellation can fall inside it.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from alkstore_sa import Job
from alkstore_sa.worker._supervisor import Supervisor

from .. import _fakeclock
from .._fakebackend import FakeBackend, FakeDB, bind, run_for, settings


def _recording(ran: list[int]):  # type: ignore[no-untyped-def]
    async def handler(job: Job) -> None:
        ran.append(job.id)
        await asyncio.sleep(0.1)

    return handler


def test_q27_a_job_claimed_after_a_stop_is_released_without_running() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, claim_latency=0.5)
        job_id = db.enqueue(notify=False)  # the first claim (t=0) is in flight until 0.5
        ran: list[int] = []
        sup = Supervisor(settings(shutdown_timeout=30.0, poll_interval=60.0))
        returned = await run_for(
            sup, [bind(db, _recording(ran))], FakeBackend(listen_after=0.0), stop_at=0.2
        )
        assert ran == []  # claimed after the stop: never started
        assert db.times("release") == [pytest.approx(0.5)]  # given back when it arrived
        row = db.rows[job_id]
        assert (row.job.status, row.job.attempts) == ("pending", 1)
        assert returned == pytest.approx(0.5)  # no grace spent on a job that never ran

    _fakeclock.run(scenario())


def test_q27_cancelling_run_waits_for_a_claim_in_flight_and_releases_its_jobs() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, claim_latency=0.5)
        job_id = db.enqueue(notify=False)
        ran: list[int] = []
        sup = Supervisor(settings(shutdown_timeout=30.0, poll_interval=60.0))
        task = loop.create_task(sup.run([bind(db, _recording(ran))], FakeBackend(listen_after=0.0)))
        loop.call_at(0.2, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert ran == []
        row = db.rows[job_id]  # back at once, not left to lapse
        assert (row.job.status, row.job.attempts) == ("pending", 1)
        assert loop.time() == pytest.approx(0.5)

    _fakeclock.run(scenario())
