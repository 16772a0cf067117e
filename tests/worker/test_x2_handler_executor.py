"""X2: ``Worker(..., handler_executor=)`` runs sync handlers in an executor.

A CPU-bound handler in a process pool keeps its lease (heartbeats stay in
the worker); the same handler on the worker's own threads loses it (so the
first test can fail); a child killed mid-job retries its job and the worker
recovers with a fresh pool; outcomes cross back; the construction checks.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, create_engine

from alkstore_sa import AsyncWorker, Job, QueueOpts, Store, Worker
from alkstore_sa.cli._db import CliError
from alkstore_sa.cli._worker import resolve_worker
from alkstore_sa.worker._pool import HandlerPool

from .._qtools import dead_row
from .._workers import start_worker, wait_for
from . import _x2_app

LEASE = QueueOpts(visibility_timeout=1, max_attempts=1)  # beaten every 1/3 s
HOLD_SECONDS = 1.6  # past the 1 s lease by more than a beat (1/3 s)


@pytest.fixture
def pool() -> Iterator[ProcessPoolExecutor]:
    executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


def _settled(job: Job | None) -> bool:
    return job is None or job.status == "dead"  # acked, or its one attempt lapsed (Q12)


def _runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _lease(runs: Path) -> list[str]:
    """``hold``'s record: was its claim unexpired when it finished?"""
    return _runs(runs.with_name(runs.name + ".lease"))


def _outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "alkstore_outcome", None) == outcome]


def _hold(
    database_url: URL, store: Store, tmp_path: Path, executor: Executor | None
) -> tuple[int, Path]:
    runs = tmp_path / "runs"
    url = database_url.render_as_string(hide_password=False)
    job_id = store.queue("x2", LEASE).enqueue(
        _x2_app.payload(str(runs), seconds=HOLD_SECONDS, url=url)
    )
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker(
            {s.queue("x2", LEASE): _x2_app.hold}, handler_executor=executor, poll_interval=0.2
        ),
    )
    try:
        # A spawned pool's first child starts slowly on a busy machine.
        wait_for(lambda: _settled(store.queue("x2").get_job(job_id)), timeout=40)
    finally:
        running.stop()
    return job_id, runs


def test_x2_a_cpu_bound_handler_in_a_process_pool_keeps_its_lease(
    database_url: URL,
    store: Store,
    tmp_path: Path,
    pool: ProcessPoolExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    job_id, runs = _hold(database_url, store, tmp_path, pool)
    assert len(_runs(runs)) == 1  # 0 double runs
    assert _lease(runs) == ["held"]  # beaten while it ran
    assert _outcomes(caplog, "lost") == []  # 0 lapses
    assert not any("heartbeat found its claim gone" in r.getMessage() for r in caplog.records)
    assert dead_row(store.engine, job_id) is None  # acked, not buried as lapsed


def test_x2_the_same_handler_on_the_workers_threads_loses_its_lease(
    database_url: URL, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    _, runs = _hold(database_url, store, tmp_path, None)
    # Its heartbeats could not run while it held the GIL: the claim lapsed
    # under it, free for any other worker to claim and run again.  (Whether
    # this worker then acks it, nobody having claimed it meanwhile, or finds
    # it lost first depends on which of its beat and its ack goes out first.)
    assert _lease(runs) == ["lapsed"]
    assert len(_runs(runs)) == 1


def test_x2_a_child_killed_mid_job_retries_it_and_the_pool_is_replaced(
    database_url: URL,
    store: Store,
    tmp_path: Path,
    pool: ProcessPoolExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="alkstore_sa.worker")
    opts = QueueOpts(retry_base=0.05, retry_cap=0.1)
    runs = tmp_path / "runs"
    q = store.queue("x2k", opts)
    job_id = q.enqueue(_x2_app.payload(str(runs)))
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker(
            {s.queue("x2k", opts): _x2_app.die_once}, handler_executor=pool, poll_interval=0.2
        ),
    )
    try:
        wait_for(lambda: q.get_job(job_id) is None, timeout=40)  # acked
    finally:
        running.stop()
    # The second attempt ran in the fresh pool: another process.
    (first, _, killed), (again, _, pid) = (line.split(" ", 2) for line in _runs(runs))
    assert (first, again) == ("1", "2") and killed != pid
    [retried] = _outcomes(caplog, "retried")
    assert retried.alkstore_job_id == job_id and "BrokenProcessPool" in retried.getMessage()
    assert any("handler process pool broken" in r.getMessage() for r in caplog.records)


def test_x2_outcomes_cross_back_from_the_child(
    database_url: URL, store: Store, tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    opts = QueueOpts(keep_completed=60, retry_base=3600)
    runs = tmp_path / "runs"
    q = store.queue("x2o", opts)
    ids = {do: q.enqueue(_x2_app.payload(str(runs), do=do)) for do in ("ok", "fail", "snooze")}
    ids["boom"] = q.enqueue(_x2_app.payload(str(runs), do="boom"))
    running = start_worker(
        "sync",
        database_url,
        lambda s: Worker(
            {s.queue("x2o", opts): _x2_app.outcomes}, handler_executor=pool, poll_interval=0.2
        ),
    )
    try:
        wait_for(lambda: len(_runs(runs)) == 4 and q.get_job(ids["boom"]).last_error, timeout=40)
        wait_for(lambda: q.get_job(ids["snooze"]).status == "pending")
        wait_for(lambda: q.get_job(ids["ok"]).status == "completed")
    finally:
        running.stop()
    done = q.get_job(ids["ok"])
    assert done.result is not None and done.result.startswith(b"done in ")
    assert int(done.result.split()[-1]) != os.getpid()
    failed = q.get_job(ids["fail"])
    assert (failed.status, failed.last_error) == ("dead", "refused in the child")
    snoozed = q.get_job(ids["snooze"])
    assert (snoozed.attempts, snoozed.last_error) == (0, None)
    boom = q.get_job(ids["boom"])
    assert (boom.status, boom.last_error) == ("pending", "boom in the child")


def test_x2_construction_checks(store: Store, pool: ProcessPoolExecutor) -> None:
    q = store.queue("x2v")

    def with_session(job: Job, session: Any) -> None:
        pass

    with pytest.raises(ValueError, match=r"session-scoped .* process pool"):
        Worker({q: with_session}, handler_executor=pool)
    with pytest.raises(ValueError, match="importable by name"):
        Worker({q: lambda job: None}, handler_executor=pool)
    with pytest.raises(TypeError, match=r"concurrent\.futures\.Executor"):
        Worker({q: _x2_app.hold}, handler_executor=object())  # type: ignore[arg-type]
    with ThreadPoolExecutor(1) as threads:  # threads take anything, sessions included
        Worker({q: with_session}, handler_executor=threads)


def test_x2_cli_handler_processes(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", database_url.render_as_string(False))
    worker = resolve_worker("tests.worker._x2_app:make_worker", None, 2)
    assert isinstance(worker, Worker)
    pool = worker._pool
    assert isinstance(pool, HandlerPool) and pool.processes
    pool.close()
    with pytest.raises(CliError, match=r"--handler-processes: .*session-scoped"):
        resolve_worker("tests.worker.test_x2_handler_executor:session_target", None, 1)


def session_target() -> Worker:
    """A CLI target whose handler takes a session: refused with a process pool."""
    store = Store(create_engine("postgresql+psycopg://nobody@localhost/none"))

    def with_session(job: Job, session: Any) -> None:
        pass

    return Worker({store.queue("x2s"): with_session})


def test_x2_an_async_worker_runs_its_sync_handlers_in_the_pool(
    database_url: URL, store: Store, tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    runs = tmp_path / "runs"
    q = store.queue("x2a", QueueOpts(keep_completed=60))
    job_id = q.enqueue(_x2_app.payload(str(runs), do="ok"))
    running = start_worker(
        "async",
        database_url,
        lambda s: AsyncWorker(
            {s.queue("x2a", QueueOpts(keep_completed=60)): _x2_app.outcomes},
            handler_executor=pool,
            poll_interval=0.2,
        ),
    )
    try:
        wait_for(lambda: q.get_job(job_id).status == "completed", timeout=40)
    finally:
        running.stop()
    [line] = _runs(runs)
    assert int(line.split()[2]) != os.getpid()


def test_x2_an_owned_pool_ends_its_processes_when_the_run_closes_it() -> None:
    """A handler still running in the worker's own pool at the end of the run belongs to
    a job the shutdown released: its process is ended by close(), not left to the
    interpreter's exit (which can hang on the pool: cpython#83386)."""
    import time

    from alkstore_sa.worker._pool import POOL_EXIT_WAIT

    executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    busy = executor.submit(time.sleep, 60)
    wait_for(lambda: busy.running(), timeout=30)
    [process] = executor._processes.values()  # type: ignore[attr-defined]
    began = time.monotonic()
    HandlerPool(executor, owned=True).close()
    assert time.monotonic() - began < POOL_EXIT_WAIT + 2
    # Killed by close(); on a loaded machine its end may take a moment more to show.
    wait_for(lambda: not process.is_alive(), timeout=10)
