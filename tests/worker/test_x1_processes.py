"""X1: N worker processes under one supervisor -- a drain shared by the children, SIGTERM
mid-drain (every child graceful, 0 lost, exit 0), kill -9 of a child (restarted, its jobs
lapse and run once more), and a start failure (one line, non-zero, no restart).

Real processes against a real PostgreSQL: each handler writes its pid and
clock_timestamp() (``_x1_app``), and the assertions are SQL over those rows."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Store
from alkstore_sa.worker._child import EXIT_WAIT
from alkstore_sa.worker._processes import ProcessSupervisor, restart_delay

from .._workers import wait_for
from ..cli.test_cli import alkstore, one_line_error
from . import _x1_app
from ._x1 import Supervised, cli, make_table, runs, script

pytestmark = pytest.mark.chaos

APP = "tests.worker._x1_app:make_worker"


@pytest.fixture
def table(engine: Engine) -> Engine:
    make_table(engine)
    return engine


@pytest.fixture
def closing() -> Iterator[list[Supervised]]:
    started: list[Supervised] = []
    yield started
    for sup in started:
        sup.close()


def _left(store: Store) -> int:
    s = store.queue("x1").stats()
    return s.due + s.scheduled + s.processing


def _done_once(engine: Engine, ids: list[int]) -> None:
    """Every job has exactly one ``done`` row (ran to its ack once, never twice)."""
    rows = runs(
        engine,
        "SELECT job_id, count(*) FILTER (WHERE kind = 'done') FROM x1_runs"
        " WHERE job_id = ANY(:ids) GROUP BY job_id",
        ids=ids,
    )
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert {r[1] for r in rows} == {1}


def test_x1_children_share_a_drain_and_run_every_job_once(
    database_url: URL, store: Store, table: Engine, closing: list[Supervised]
) -> None:
    sup = script(database_url, "make_worker", 2)
    closing.append(sup)
    children = sup.wait_running(2)
    assert len(set(children.values())) == 2  # a worker id of its own each
    for pid, wid in children.items():
        assert wid.split(":")[:2] == [os.uname().nodename, str(pid)]  # host:pid:...
    ids = store.queue("x1").enqueue_many([b""] * 300)
    wait_for(lambda: _left(store) == 0, timeout=60, every=0.05)
    code, _ = sup.stop()
    assert code == 0, sup.text()
    _done_once(table, ids)
    [(pids,)] = runs(table, "SELECT count(DISTINCT pid) FROM x1_runs WHERE kind = 'done'")
    assert pids == 2  # both children ran jobs
    # ... at the same time: their runs overlap in clock_timestamp().
    [(overlap,)] = runs(
        table,
        "SELECT (SELECT max(at) FROM x1_runs WHERE pid = a.pid) >"
        "       (SELECT min(at) FROM x1_runs WHERE pid = b.pid)"
        "   AND (SELECT max(at) FROM x1_runs WHERE pid = b.pid) >"
        "       (SELECT min(at) FROM x1_runs WHERE pid = a.pid)"
        "  FROM (SELECT DISTINCT pid FROM x1_runs) a, (SELECT DISTINCT pid FROM x1_runs) b"
        " WHERE a.pid < b.pid",
    )
    assert overlap is True


def test_x1_sigterm_mid_drain_stops_every_child_gracefully_and_loses_nothing(
    database_url: URL, store: Store, table: Engine, closing: list[Supervised]
) -> None:
    sup = cli(database_url, APP, 2, X1_WORK="0.3", X1_GRACE="5")
    closing.append(sup)
    children = sup.wait_running(2)
    ids = store.queue("x1").enqueue_many([b""] * 60)
    wait_for(lambda: runs(table, "SELECT count(*) FROM x1_runs WHERE kind = 'done'")[0][0] >= 6)
    code, took = sup.stop(signal.SIGTERM)
    assert code == 0, sup.text()
    assert took < 5 + 3  # the children's grace, and a margin for a loaded machine
    log = sup.text()
    for wid in children.values():
        assert f"worker {wid} stopped" in log  # its run ended through the graceful path
    assert "released for other workers" not in log  # every handler finished in the grace
    assert "restarting" not in log
    # 0 lost: each job either ran once to its ack, or is still pending, never started.
    [(started, done)] = runs(
        table,
        "SELECT count(*) FILTER (WHERE kind = 'started'), count(*) FILTER (WHERE kind = 'done')"
        "  FROM x1_runs",
    )
    assert started == done
    left = store.queue("x1").stats()
    assert left.processing == 0 and left.due == len(ids) - done > 0
    # Another run finishes the rest: every job exactly once.
    sup2 = cli(database_url, APP, 1)
    closing.append(sup2)
    wait_for(lambda: _left(store) == 0, timeout=60, every=0.05)
    assert sup2.stop()[0] == 0
    _done_once(table, ids)


def test_x1_a_child_whose_worker_has_its_own_process_pool_stops_on_sigterm(
    database_url: URL, store: Store, table: Engine, closing: list[Supervised]
) -> None:
    """X1 x X2: a factory that builds its own ``ProcessPoolExecutor`` (not the CLI's
    ``--handler-processes``): the child shuts the pool down when its run ends, so
    the supervisor exits 0 at once -- a pool left up would hang each child's exit
    (multiprocessing joins the child's own processes before the pool's exit hook)."""
    sup = script(database_url, "make_pooled_worker", 2)
    closing.append(sup)
    children = sup.wait_running(2)
    ids = store.queue("x1").enqueue_many([b""] * 20)
    wait_for(lambda: _left(store) == 0, timeout=60, every=0.05)
    code, took = sup.stop(signal.SIGTERM)
    assert code == 0, sup.text()
    assert took < 10, sup.text()  # the default grace is 30 s; a hung exit takes all of it
    rows = runs(table, "SELECT job_id, pid FROM x1_runs WHERE job_id = ANY(:ids)", ids=ids)
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert not {r[1] for r in rows} & set(children)  # run in the pools, not the children


def test_x1_a_child_whose_exit_hangs_is_ended_once_its_worker_stopped(
    database_url: URL, table: Engine, closing: list[Supervised]
) -> None:
    """Something the factory left running (here a thread; once in CI a process pool's
    exit) would hold the child's exit, and the supervisor with it, for good."""
    sup = script(database_url, "make_worker_leaving_a_thread", 1)
    closing.append(sup)
    sup.wait_running(1)
    code, took = sup.stop(signal.SIGTERM)
    assert code == 0, sup.text()
    assert EXIT_WAIT <= took < EXIT_WAIT + 10, sup.text()
    assert f"not exited {EXIT_WAIT:g}s after its worker stopped; ending it" in sup.text()


def test_x1_a_signal_while_the_supervisor_holds_its_lock_still_stops_it() -> None:
    """SIGTERM's handler runs ``stop()`` on the main thread between any two bytecodes,
    also while ``run()`` holds the supervisor's lock (a child's health report, the
    loop's stop check): it must not wait for that lock.  Once in CI a plain lock
    there hung the supervisor for good on SIGTERM."""
    sup = ProcessSupervisor(_x1_app.make_worker, 2)
    returned = threading.Event()

    def handler_inside_the_lock() -> None:
        with sup._lock:  # where run() is when the signal lands
            sup.stop()
        returned.set()

    threading.Thread(target=handler_inside_the_lock, daemon=True).start()
    assert returned.wait(5)
    assert not sup.health().running and sup._stopping()


def test_x1_kill_9_of_a_child_restarts_it_and_its_jobs_run_once_more(
    database_url: URL, store: Store, table: Engine, closing: list[Supervised]
) -> None:
    sup = cli(database_url, APP, 2, X1_WORK="0.2")
    closing.append(sup)
    first = sup.wait_running(2)
    ids = store.queue("x1").enqueue_many([b""] * 120)
    victim = next(iter(first))
    wait_for(lambda: runs(table, "SELECT 1 FROM x1_runs WHERE pid = :p", p=victim), every=0.02)
    os.kill(victim, signal.SIGKILL)
    sup.wait_for(lambda: "died of SIGKILL" in sup.text() and "restarting it in 1 s" in sup.text())
    children = sup.wait_running(3)  # the restarted one: a new pid, a new worker id
    [new] = set(children) - set(first)
    wait_for(lambda: _left(store) == 0, timeout=60, every=0.05)
    code, _ = sup.stop()
    assert code == 0, sup.text()
    _done_once(table, ids)
    # The victim's jobs in flight lapsed and ran again, once, in another process.
    lapsed = runs(
        table,
        "SELECT job_id FROM x1_runs WHERE pid = :p AND kind = 'started'"
        " EXCEPT SELECT job_id FROM x1_runs WHERE pid = :p AND kind = 'done'",
        p=victim,
    )
    assert lapsed, "the child was killed between jobs: nothing lapsed"
    for (job_id,) in lapsed:
        [(pid,)] = runs(table, "SELECT pid FROM x1_runs WHERE job_id = :j AND kind = 'done'",
                        j=job_id)  # fmt: skip
        assert pid != victim
    assert runs(table, "SELECT 1 FROM x1_runs WHERE pid = :p AND kind = 'done'", p=new)


def test_x1_restart_backoff_doubles_from_1s_to_30s_and_resets_after_a_long_run() -> None:
    backoff, delays = 1.0, []
    for _ in range(7):  # a child that dies again at once, seven times
        delay, backoff = restart_delay(backoff, ran=0.5)
        delays.append(delay)
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    assert restart_delay(backoff, ran=29.9) == (30, 30)
    assert restart_delay(backoff, ran=30.0) == (1, 2)  # it had recovered: from 1 s again


def test_x1_a_child_that_dies_again_is_restarted_after_twice_the_wait(
    database_url: URL, table: Engine, closing: list[Supervised]
) -> None:
    sup = cli(database_url, APP, 1)
    closing.append(sup)
    [first] = sup.wait_running(1)
    os.kill(first, signal.SIGKILL)
    sup.wait_for(lambda: "restarting it in 1 s" in sup.text())
    [second] = set(sup.wait_running(2)) - {first}
    os.kill(second, signal.SIGKILL)
    sup.wait_for(lambda: "restarting it in 2 s" in sup.text())
    assert len(sup.wait_running(3)) == 3  # restarted a second time
    code, _ = sup.stop()
    assert code == 0, sup.text()


def test_x1_bad_target_is_one_line_and_no_restart(database_url: URL) -> None:
    proc = alkstore("worker", "tests.worker._x1_nosuch:worker", "--processes", "2",
                    url=database_url)  # fmt: skip
    line = one_line_error(proc, 2)
    assert "cannot import 'tests.worker._x1_nosuch'" in line
    proc = alkstore("worker", "tests.worker._x1_app:make_nothing", "--processes", "2",
                    url=database_url)  # fmt: skip
    assert "returned a str, not a Worker" in one_line_error(proc, 2)


def test_x1_missing_schema_is_one_line(database_url: URL) -> None:
    proc = alkstore("worker", APP, "--processes", "2", "--schema", "x1_nosuch", url=database_url)
    assert "no alkstore tables in schema 'x1_nosuch'" in one_line_error(proc, 1)


def test_x1_run_processes_start_failure_raises_once_no_restart(
    database_url: URL, closing: list[Supervised]
) -> None:
    sup = script(database_url, "make_missing_schema", 2)
    closing.append(sup)
    assert sup.proc.wait(60) == 3
    log = sup.text()
    assert "WorkerStartError 1: " in log and "x1_nosuch" in log
    assert "restarting" not in log and log.count("WorkerStartError") == 1


def test_x1_the_same_worker_id_in_two_processes_is_refused(
    database_url: URL, closing: list[Supervised]
) -> None:
    sup = script(database_url, "make_fixed_id_worker", 2)
    closing.append(sup)
    assert sup.proc.wait(60) == 3
    assert "two worker processes have the worker id 'same'" in sup.text()


def test_x1_a_child_that_cannot_import_the_factory_is_a_start_failure(
    database_url: URL, closing: list[Supervised]
) -> None:
    # Before child_main runs (the spawned interpreter unpickling the factory):
    # no message from the child, but an exit code and a traceback -- not a restart.
    sup = script(database_url, "make_worker", 2, module="tests.worker._x1_broken")
    closing.append(sup)
    assert sup.proc.wait(60) == 3
    log = sup.text()
    assert "refuses to import in a child process" in log  # the child's own traceback
    assert "WorkerStartError 1: worker process exited with code 1 before its worker" in log
    assert "restarting" not in log
