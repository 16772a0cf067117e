"""C1 in the worker runtime, on the fake backend and a virtual clock.

A cancel's notification reaches the run through its listener's wake (the
fake backend's ``notify``); the heartbeat fallback asks the port which lost
claims have no row left.  Times are the loop's virtual seconds, exact.
End to end over PostgreSQL: ``test_c1_worker_cancel.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from alkstore_sa import Job
from alkstore_sa.worker._supervisor import Supervisor

from .. import _fakeclock
from .._fakebackend import FakeBackend, FakeDB, bind, run_for, settings

CONTROL = "alkstore.alkstore.control"


def _run(test: object) -> None:
    _fakeclock.run(test)  # type: ignore[arg-type]


def _cancelled(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "alkstore_outcome", None) == "cancelled"]


def test_c1_notified_cancel_stops_an_async_handler_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    ended: list[tuple[str, float]] = []

    async def handler(job: Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            ended.append(("cancelled", loop.time()))
            raise

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        job_id = db.enqueue(visibility_timeout=3.0, notify=False)
        backend = FakeBackend(listen_after=0.0)

        def cancel() -> None:
            db.cancel(job_id)
            backend.notify(CONTROL, f"cancel:{job_id}")

        loop.call_at(0.5, cancel)
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, handler)], backend, stop_at=2.0)
        assert CONTROL in backend.channels
        assert ended == [("cancelled", 0.5)]
        for op in ("ack", "retry", "fail", "release"):
            assert db.times(op) == []
        assert db.times("heartbeat") == []  # never beaten: cancelled before its first beat

    _run(scenario())
    [record] = _cancelled(caplog)
    assert record.levelno == logging.INFO and "cancelled" in record.getMessage()


def test_c1_heartbeat_fallback_cancels_a_job_whose_row_is_gone() -> None:
    ended: list[float] = []

    async def handler(job: Job) -> None:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            ended.append(asyncio.get_running_loop().time())
            raise

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        job_id = db.enqueue(visibility_timeout=3.0, notify=False)
        loop.call_at(0.5, db.cancel, job_id)  # no notification: LISTEN was down
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, handler)], FakeBackend(listen_after=0.0), stop_at=2.0)
        assert db.times("heartbeat") == [1.0]
        assert db.times("gone") == [1.0]
        assert ended == [1.0]  # stopped by the heartbeat that found it gone
        assert db.times("ack") == [] and db.times("retry") == []

    _run(scenario())


def test_c1_a_job_claimed_ahead_and_not_started_is_dropped_unrun(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    ran: list[int] = []
    long_ids: set[int] = set()

    async def handler(job: Job) -> None:
        ran.append(job.id)
        await asyncio.sleep(2.0 if job.id in long_ids else 0.001)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        db.enqueue(notify=False)  # short: the queue claims ahead from then on
        backend = FakeBackend(listen_after=0.0)
        ahead: list[int] = []

        def two() -> None:
            long_ids.add(db.enqueue(notify=False))
            ahead.append(db.enqueue())  # one claim takes both: the second waits in ready

        def cancel() -> None:
            db.cancel(ahead[0])
            backend.notify(CONTROL, f"cancel:{ahead[0]}")

        loop.call_at(0.5, two)
        loop.call_at(1.0, cancel)
        sup = Supervisor(settings(concurrency=1))
        await run_for(sup, [bind(db, handler)], backend, stop_at=3.0)
        assert ahead[0] not in ran and len(ran) == 2
        assert db.times("release") == []
        assert not db.rows  # the long one was acked

    _run(scenario())
    [record] = _cancelled(caplog)
    assert "claimed ahead, not run" in record.getMessage()


def _in_flight_cancel(handler: Callable[[Job], Any], ids: list[int], *, ahead: bool) -> None:
    """Enqueue a job at 0.5 and cancel it at 0.6, while the claim that took it at 0.5
    is still replying (held at 0.7).  ``ahead``: a short job ran first (from then on
    the run claims ahead) and the claim at 0.5 takes a long one with it, so the
    cancelled job waits in ``ready``.  ``ids``: filled in enqueue order."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop, reply_latency=0.2)
        backend = FakeBackend(listen_after=0.0)

        def enqueue() -> None:
            ids.extend([db.enqueue(notify=False)] if ahead else [])
            ids.append(db.enqueue())

        def cancel() -> None:
            db.cancel(ids[-1])
            backend.notify(CONTROL, f"cancel:{ids[-1]}")

        if ahead:
            ids.append(db.enqueue(notify=False))
        loop.call_at(0.5, enqueue)
        loop.call_at(0.6, cancel)
        await run_for(
            Supervisor(settings(concurrency=1)), [bind(db, handler)], backend, stop_at=3.0
        )
        assert db.times("release") == [] and db.times("retry") == []
        acked = [claim[0] for c in db.calls if c.op == "ack" for claim in c.args]
        assert ids[-1] not in acked  # nothing is acked for it

    _run(scenario())


def test_c1_a_cancel_while_the_claim_replies_drops_the_job_claimed_ahead_unrun(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    ids: list[int] = []
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)
        await asyncio.sleep(0.001 if job.id == ids[0] else 1.0)

    _in_flight_cancel(handler, ids, ahead=True)
    short, long, _cancelled_id = ids
    assert ran == [short, long]  # never the cancelled one
    [record] = _cancelled(caplog)
    assert "claimed ahead, not run" in record.getMessage()


def test_c1_a_cancel_while_the_claim_replies_stops_the_job_started_from_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    finished: list[int] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(1.0)
        finished.append(job.id)

    _in_flight_cancel(handler, [], ahead=False)
    assert finished == []
    assert len(_cancelled(caplog)) == 1


def test_c1_a_cancel_after_the_ack_changes_nothing() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        db = FakeDB(loop)
        db.enqueue(notify=False)
        backend = FakeBackend(listen_after=0.0)
        loop.call_at(0.5, lambda: backend.notify(CONTROL, "cancel:999999,x"))  # not held
        sup = Supervisor(settings())
        await run_for(sup, [bind(db, _short)], backend, stop_at=1.0)
        assert not db.rows and len(db.times("ack")) == 1

    _run(scenario())


async def _short(job: Job) -> None:
    await asyncio.sleep(0.1)
