"""Q28: a session-scoped handler's writes commit with the ack, or not at all."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, text
from sqlalchemy.orm import Session

from alkstore_sa import AsyncWorker, FailJob, Job, QueueOpts, Store, Worker

from .._workers import KINDS, start_worker, wait_for

INSERT = text("INSERT INTO receipts (job_id, note) VALUES (:job_id, :note)")


@pytest.fixture
def receipts(store: Store) -> Iterator[Store]:
    """The app's own table, written by the handlers."""
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE receipts (job_id bigint PRIMARY KEY, note text)"))
    yield store


def _notes(store: Store) -> dict[int, str]:
    with store.engine.connect() as conn:
        return {r[0]: r[1] for r in conn.execute(text("SELECT job_id, note FROM receipts"))}


def _session_handler(kind: str, after_write: Any) -> Any:
    """A ``(job, session)`` handler of the worker's kind: write a receipt, then ``after_write``."""
    if kind == "sync":

        def charge(job: Job, session: Session) -> None:
            assert isinstance(session, Session)
            session.execute(INSERT, {"job_id": job.id, "note": "sent"})
            after_write(job)

        return charge

    from sqlalchemy.ext.asyncio import AsyncSession

    async def acharge(job: Job, session: AsyncSession) -> None:
        assert isinstance(session, AsyncSession)
        await session.execute(INSERT, {"job_id": job.id, "note": "sent"})
        after_write(job)

    return acharge


def _run(
    kind: str, database_url: URL, store: Store, after_write: Any, opts: QueueOpts | None = None
) -> tuple[int, list[Job]]:
    q = store.queue("receipts", opts)
    job_id = q.enqueue(b"")
    calls: list[Job] = []

    def then(job: Job) -> None:
        calls.append(job)
        after_write(job)

    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind,
        database_url,
        lambda s: cls({s.queue("receipts", opts): _session_handler(kind, then)}, poll_interval=0.2),
    )
    try:
        wait_for(lambda: calls)
    finally:
        running.stop()
    return job_id, calls


@pytest.mark.parametrize("kind", KINDS)
def test_q28_handler_writes_commit_with_the_ack(
    kind: str, database_url: URL, receipts: Store
) -> None:
    job_id, _ = _run(kind, database_url, receipts, lambda job: None)
    assert _notes(receipts) == {job_id: "sent"}
    assert receipts.queue("receipts").get_job(job_id) is None


@pytest.mark.parametrize("kind", KINDS)
def test_q28_handler_exception_rolls_back_its_writes_and_retries(
    kind: str, database_url: URL, receipts: Store
) -> None:
    def boom(job: Job) -> None:
        raise RuntimeError("printer on fire")

    job_id, _ = _run(kind, database_url, receipts, boom, QueueOpts(retry_base=100))
    assert _notes(receipts) == {}
    job = receipts.queue("receipts").get_job(job_id)
    assert job is not None
    assert (job.status, job.last_error) == ("pending", "printer on fire")


@pytest.mark.parametrize("kind", KINDS)
def test_q28_failjob_rolls_back_its_writes_and_dead_letters(
    kind: str, database_url: URL, receipts: Store
) -> None:
    def give_up(job: Job) -> None:
        raise FailJob("no such customer")

    job_id, _ = _run(kind, database_url, receipts, give_up)
    assert _notes(receipts) == {}
    job = receipts.queue("receipts").get_job(job_id)
    assert job is not None and (job.status, job.last_error) == ("dead", "no such customer")


@pytest.mark.parametrize("kind", KINDS)
def test_q28_claim_lost_before_the_ack_rolls_back_the_writes(
    kind: str, database_url: URL, receipts: Store
) -> None:
    # The job is cancelled on another connection while the handler runs: the
    # ack in the handler's transaction finds no claim, so nothing commits.
    q = receipts.queue("receipts")

    def cancelled_meanwhile(job: Job) -> None:
        assert q.cancel(job.id) is True

    job_id, calls = _run(kind, database_url, receipts, cancelled_meanwhile)
    assert [j.id for j in calls] == [job_id]
    assert _notes(receipts) == {}
    assert q.get_job(job_id) is None


def test_q28_sync_session_handler_returning_a_coroutine_is_not_acked(
    database_url: URL, store: Store
) -> None:
    # An async def behind a plain sync decorator: called as (job, session),
    # it returns a coroutine without running; the ack must not commit.
    ran: list[int] = []

    async def body(job: Job, session: Session) -> None:
        ran.append(job.id)

    @functools.wraps(body)
    def wrapped(job: Job, session: Session) -> Any:
        return body(job, session)

    q = store.queue("wrapped", QueueOpts(retry_base=100))
    job_id = q.enqueue(b"")
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker(
            {s.queue("wrapped", QueueOpts(retry_base=100)): wrapped}, poll_interval=0.05
        ),
    )
    try:
        wait_for(lambda: (j := q.get_job(job_id)) is not None and j.last_error)
    finally:
        running.stop()
    job = q.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 1)
    assert job.last_error is not None and "must be run by AsyncWorker" in job.last_error
    assert ran == []
