"""T2: ``Worker(tasks)`` / ``AsyncWorker(tasks)`` run a registry, dispatching by task name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, text
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncWorker, FailJob, QueueOpts, Store, Tasks, Worker

from .._workers import KINDS, start_worker, wait_for

# retry_base=0.5: d = 0.5, a delay drawn from [0, 0] -- retries come at once.
FAST = QueueOpts(max_attempts=3, retry_base=0.5)
INSERT = text("INSERT INTO receipts (order_id, note) VALUES (:order_id, :note)")


def _registry(kind: str, store: Any, calls: list[tuple[str, Any]]) -> Tasks[Any]:
    tasks: Tasks[Any] = Tasks(store)
    lock = threading.Lock()

    def record(name: str, value: Any) -> None:
        with lock:
            calls.append((name, value))

    if kind == "sync":

        @tasks.task(queue="receipts", opts=FAST, name="receipt")
        def receipt(order_id: int) -> None:
            record("receipt", order_id)

        @tasks.task(queue="receipts", opts=FAST, name="boom")
        def boom(why: str) -> None:
            raise FailJob(why)

    else:

        @tasks.task(queue="receipts", opts=FAST, name="receipt")
        async def receipt(order_id: int) -> None:
            record("receipt", order_id)

        @tasks.task(queue="receipts", opts=FAST, name="boom")
        def boom(why: str) -> None:  # a plain function on an AsyncWorker: run in a thread
            raise FailJob(why)

    @tasks.task(queue="emails", name="email")
    def email(to: str, cc: list[str] | None = None) -> None:
        record("email", (to, cc))

    return tasks


def _dead(store: Store, job_id: int) -> Any:
    job = store.queue("receipts").get_job(job_id)
    return job if job is not None and job.status == "dead" else None


@pytest.mark.parametrize("kind", KINDS)
def test_t2_worker_runs_every_task_on_its_queue(kind: str, database_url: URL, store: Store) -> None:
    calls: list[tuple[str, Any]] = []
    producer = _registry("sync", store, [])
    producer.get("receipt").defer(order_id=1)  # type: ignore[union-attr]
    producer.get("email").defer(to="a@b.c", cc=["d@e.f"])  # type: ignore[union-attr]
    failed = producer.get("boom").defer(why="no such card")  # type: ignore[union-attr]
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls(_registry(kind, s, calls), poll_interval=0.2)
    )
    try:
        wait_for(lambda: len(calls) == 2 and _dead(store, failed))
    finally:
        running.stop()
    assert sorted(calls) == [("email", ("a@b.c", ["d@e.f"])), ("receipt", 1)]
    assert [q.name for q in running.worker.queues] == ["receipts", "emails"]
    assert _dead(store, failed).last_error == "no such card"


@pytest.mark.parametrize("kind", KINDS)
def test_t2_unknown_task_is_retried_then_dies_named(
    kind: str, database_url: URL, store: Store
) -> None:
    q = store.queue("receipts", FAST)
    envelope = {"v": 1, "task": "added.in.a.later.deploy", "kwargs": {}}
    job_id = q.enqueue(json.dumps(envelope).encode())
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls(_registry(kind, s, []), poll_interval=0.1)
    )
    try:
        dead = wait_for(lambda: _dead(store, job_id))
    finally:
        running.stop()
    assert dead.attempts == 3  # retried on the curve, not buried at once
    assert dead.last_error == "unknown task 'added.in.a.later.deploy'"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"v": 2, "task": "receipt", "kwargs": {}}', "unsupported envelope version 2"),
        (b'{"v": 1, "kwargs": {}}', "'task' must be a non-empty string"),
        (b'{"v": 1, "task": "receipt", "kwargs": [1]}', "'kwargs' must be a JSON object"),
        # Issue 24: neither retried (a RecursionError was, five times) nor run.
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
        (b'{"v": 1, "task": "receipt", "kwargs": {"order_id": NaN}}', "NaN is not a JSON value"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_t2_invalid_envelope_dies_at_once(
    kind: str, database_url: URL, store: Store, payload: bytes, why: str
) -> None:
    job_id = store.queue("receipts", FAST).enqueue(payload)
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls(_registry(kind, s, []), poll_interval=0.1)
    )
    try:
        dead = wait_for(lambda: _dead(store, job_id))
    finally:
        running.stop()
    assert dead.attempts == 1
    assert dead.last_error.startswith("invalid task payload")
    assert why in dead.last_error


def test_t2_arguments_that_no_longer_fit_are_retried(database_url: URL, store: Store) -> None:
    q = store.queue("receipts", FAST)
    envelope = {"v": 1, "task": "receipt", "kwargs": {"order": 1}}  # renamed since
    job_id = q.enqueue(json.dumps(envelope).encode())
    running = start_worker(
        "sync", database_url, lambda s: Worker(_registry("sync", s, []), poll_interval=0.1)
    )
    try:
        dead = wait_for(lambda: _dead(store, job_id))
    finally:
        running.stop()
    assert dead.attempts == 3
    assert dead.last_error == "task 'receipt': missing a required argument: 'order_id'"


@pytest.fixture
def receipts(store: Store) -> Store:
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE receipts (order_id bigint PRIMARY KEY, note text)"))
    return store


def _receipts(store: Store) -> dict[int, str]:
    with store.engine.connect() as conn:
        return dict(conn.execute(text("SELECT order_id, note FROM receipts")).all())  # type: ignore[arg-type]


def _session_registry(kind: str, store: Any, ran: list[int]) -> Tasks[Any]:
    tasks: Tasks[Any] = Tasks(store)
    if kind == "sync":

        @tasks.task(queue="charges", opts=FAST, name="charge")
        def charge(session: Session, order_id: int, fail: bool = False) -> None:
            session.execute(INSERT, {"order_id": order_id, "note": "charged"})
            ran.append(order_id)
            if fail:
                raise FailJob("card declined")

    else:
        from sqlalchemy.ext.asyncio import AsyncSession

        @tasks.task(queue="charges", opts=FAST, name="charge")
        async def acharge(session: AsyncSession, order_id: int, fail: bool = False) -> None:
            await session.execute(INSERT, {"order_id": order_id, "note": "charged"})
            ran.append(order_id)
            if fail:
                raise FailJob("card declined")

    @tasks.task(queue="charges", opts=FAST, name="plain")
    async def plain(order_id: int) -> None:  # no session on a session-scoped queue
        ran.append(order_id)

    if kind == "sync":
        tasks._tasks.pop("plain")  # an async task on a sync Worker is tested elsewhere
    return tasks


@pytest.mark.parametrize("kind", KINDS)
def test_t2_q28_session_task_writes_commit_with_the_ack(
    kind: str, database_url: URL, receipts: Store
) -> None:
    producer = _session_registry("sync", receipts, [])
    charge = producer.get("charge")
    assert charge is not None and charge.takes_session
    ok = charge.defer(order_id=1)
    declined = charge.defer(order_id=2, fail=True)
    ran: list[int] = []
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls(_session_registry(kind, s, ran), poll_interval=0.1)
    )
    try:
        q = receipts.queue("charges", FAST)
        wait_for(lambda: q.get_job(ok) is None and _dead_on(q, declined))
    finally:
        running.stop()
    assert sorted(ran) == [1, 2]
    assert _receipts(receipts) == {1: "charged"}  # the declined charge's write rolled back


def _dead_on(q: Any, job_id: int) -> bool:
    job = q.get_job(job_id)
    return job is not None and job.status == "dead"


def test_t2_sync_worker_runs_an_async_task_to_the_end(database_url: URL, store: Store) -> None:
    ran: list[int] = []

    def build(s: Store) -> Worker:
        tasks = Tasks(s)

        @tasks.task(queue="receipts", name="later")
        async def later(order_id: int) -> None:
            ran.append(order_id)

        return Worker(tasks, poll_interval=0.1)

    Tasks(store).task(queue="receipts", name="later")(lambda order_id: None).defer(order_id=4)
    running = start_worker("sync", database_url, build)
    try:
        wait_for(lambda: ran)
    finally:
        running.stop()
    assert ran == [4]


def test_t2_worker_and_registry_kinds_must_match(store: Store, async_engine: Any) -> None:
    astore = AsyncStore(async_engine)
    atasks = Tasks(astore)
    atasks.task(queue="receipts", name="r")(lambda order_id: None)
    with pytest.raises(TypeError, match=r"Tasks\(Store\)"):
        Worker(atasks)  # type: ignore[arg-type]
    tasks = Tasks(store)
    with pytest.raises(ValueError, match="no tasks"):
        Worker(tasks)
    tasks.task(queue="receipts", name="r")(lambda order_id: None)
    with pytest.raises(TypeError, match=r"Tasks\(AsyncStore\)"):
        AsyncWorker(tasks)  # type: ignore[arg-type]

    async def charge(session: Any, order_id: int) -> None: ...

    tasks.task(queue="charges", name="c")(charge)
    with pytest.raises(TypeError, match="async and takes a session"):
        Worker(tasks)

    def scharge(session: Any, order_id: int) -> None: ...

    atasks.task(queue="charges", name="c")(scharge)
    with pytest.raises(TypeError, match="takes a session but is not async"):
        AsyncWorker(atasks)


_APP = """
import os
from alkstore_sa import Store, Tasks

store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
tasks = Tasks(store)
LOG = os.path.join(os.path.dirname(__file__), "ran.log")

@tasks.task(queue="receipts")
def send_receipt(order_id: int) -> None:
    with open(LOG, "a") as fh:
        fh.write(f"{order_id}\\n")
"""


def test_t2_cli_worker_runs_a_registry(database_url: URL, store: Store, tmp_path: Path) -> None:
    import os
    import signal
    import time

    (tmp_path / "shopapp.py").write_text(textwrap.dedent(_APP))
    env = {**os.environ, "ALKSTORE_DATABASE_URL": database_url.render_as_string(False)}
    env.pop("ALKSTORE_SCHEMA", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", "worker", "shopapp:tasks", "--concurrency", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The producer's own registry: the name is what both sides agree on.
        Tasks(store).task(queue="receipts", name="shopapp.send_receipt")(
            lambda order_id: None
        ).defer(order_id=42)
        log = tmp_path / "ran.log"
        deadline = time.monotonic() + 20
        while not (log.exists() and log.read_text() == "42\n") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert (tmp_path / "ran.log").read_text() == "42\n"


def test_t2_cli_app_option_takes_a_registry(database_url: URL, tmp_path: Path) -> None:
    import os

    (tmp_path / "shopapp.py").write_text(textwrap.dedent(_APP))
    env = {**os.environ, "ALKSTORE_DATABASE_URL": database_url.render_as_string(False)}
    env.pop("ALKSTORE_SCHEMA", None)
    done = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "stats", "--json", "--app", "shopapp:tasks"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout)) == ["receipts"]  # the registry's queue, before any row
