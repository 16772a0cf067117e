"""R1/R2 in a Worker: a handler's return value is the result of a job that keeps one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import URL, text

from alkstore_sa import EnqueueOpts, Job, QueueOpts, Store, Tasks

from .._workers import KINDS, handler, start_worker, wait_for, worker_class

KEEP = QueueOpts(keep_completed=600, retry_base=0.1, retry_cap=0.1)


def _run(kind: str, database_url: URL, fn: Any, done: Any, opts: QueueOpts = KEEP) -> None:
    cls = worker_class(kind)
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue("r2", opts): fn}, poll_interval=0.2)
    )
    try:
        wait_for(done)
    finally:
        running.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_r2_plain_handler_bytes_are_the_result(kind: str, database_url: URL, store: Store) -> None:
    q = store.queue("r2", KEEP)
    kept = q.enqueue(b"kept")
    plain = q.enqueue(b"plain", EnqueueOpts(keep_completed=None))
    unkept = store.queue("r2").enqueue(b"unkept")  # a handle without the stamp

    def body(job: Job) -> bytes:
        return b"result of " + job.payload

    def done() -> bool:
        return all(
            (j := q.get_job(i)) is None or j.status == "completed" for i in (kept, plain, unkept)
        )

    _run(kind, database_url, handler(kind, body), done)
    job = q.get_job(kept)
    assert job.status == "completed" and job.result == b"result of kept"
    assert job.finished_at is not None and job.attempts == 1
    assert q.get_job(plain).result == b"result of plain"  # EnqueueOpts None: the queue's stamp
    assert q.get_job(unkept) is None  # no stamp: deleted, the return value ignored


@pytest.mark.parametrize("kind", KINDS)
def test_r2_a_non_bytes_return_is_a_typeerror_and_a_retry(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("r2", KEEP)
    job_id = q.enqueue(b"x")
    calls: list[Job] = []

    def body(job: Job) -> Any:
        calls.append(job)
        return "text" if len(calls) == 1 else None

    _run(kind, database_url, handler(kind, body), lambda: q.get_job(job_id).status == "completed")
    job = q.get_job(job_id)
    assert job.attempts == 2 and job.result is None
    assert "TypeError" in (job.errors[0].traceback or "") or "bytes" in (job.last_error or "")


@pytest.mark.parametrize("kind", KINDS)
def test_r2_session_handler_result_commits_with_its_writes(
    kind: str, database_url: URL, store: Store
) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE r2_writes (job_id bigint)"))
    q = store.queue("r2", KEEP)
    job_id = q.enqueue(b"x")
    if kind == "sync":

        def body(job: Job, session: Any) -> bytes:
            session.execute(text("INSERT INTO r2_writes VALUES (:id)"), {"id": job.id})
            return b"wrote"

    else:

        async def body(job: Job, session: Any) -> bytes:  # type: ignore[misc]
            await session.execute(text("INSERT INTO r2_writes VALUES (:id)"), {"id": job.id})
            return b"wrote"

    _run(kind, database_url, body, lambda: q.get_job(job_id).status == "completed")
    assert q.get_job(job_id).result == b"wrote"
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT job_id FROM r2_writes")).scalars().all() == [job_id]


@pytest.mark.parametrize("kind", KINDS)
def test_r2_a_tasks_return_value_is_encoded_with_the_codec(
    kind: str, database_url: URL, store: Store
) -> None:
    def build(s: Any) -> Any:
        tasks = Tasks(s)

        @tasks.task(queue="r2t", opts=KEEP, name="double")
        def double(n: int) -> dict[str, int]:
            return {"n": n * 2}

        return worker_class(kind)(tasks, poll_interval=0.2), tasks

    sync_tasks = Tasks(store)

    @sync_tasks.task(queue="r2t", opts=KEEP, name="double")
    def double(n: int) -> dict[str, int]:
        return {"n": n * 2}

    job_id = double.defer(n=21)
    q = store.queue("r2t")
    running = start_worker(kind, database_url, lambda s: build(s)[0])
    try:
        wait_for(lambda: q.get_job(job_id).status == "completed")
    finally:
        running.stop()
    assert json.loads(q.get_job(job_id).result) == {"n": 42}
