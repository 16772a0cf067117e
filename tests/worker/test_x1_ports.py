"""X1's ports: `--health-port` answers for every child, `--metrics-port` serves their
counters summed (a child killed keeps its counted jobs in the sum); and the factory
`run_processes` is given is checked before any process starts."""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Iterator

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Store, Worker, run_processes
from alkstore_sa.cli._processes import processes_response
from alkstore_sa.worker import ChildHealth, ProcessesHealth, WorkerHealth

from .._workers import wait_for
from ..rules.test_b4_prometheus import _get as _sample
from ..rules.test_b4_prometheus import _scrape
from . import _x1_app
from ._x1 import Supervised, cli, make_table, runs
from .test_b5_health_port import _get

pytestmark = pytest.mark.chaos


@pytest.fixture
def sup(database_url: URL, engine: Engine) -> Iterator[Supervised]:
    make_table(engine)
    running = cli(
        database_url,
        "tests.worker._x1_app:make_worker",
        2,
        "--health-port",
        "0",
        "--metrics-port",
        "0",
    )
    yield running
    running.close()


def _acked(url: str) -> float:
    return _sample(_scrape(url), "alkstore_worker_jobs_total", queue="x1", outcome="acked") or 0


def test_x1_health_and_metrics_ports_report_every_child(
    sup: Supervised, store: Store, engine: Engine
) -> None:
    health_url, metrics_url = sup.served("worker health"), sup.served("worker metrics")
    children = sup.wait_running(2)
    _, _, body = wait_for(lambda: (r := _get(health_url))[0] == 200 and r, every=0.1)
    doc = json.loads(body)
    assert doc["healthy"] is True and doc["processes"] == 2
    assert {(c["pid"], c["worker_id"]) for c in doc["children"]} == set(children.items())
    assert all(c["healthy"] and c["running"] and c["alive"] for c in doc["children"])
    ids = store.queue("x1").enqueue_many([b""] * 200)
    wait_for(lambda: _acked(metrics_url) == len(ids), timeout=30, every=0.1)
    [(pids,)] = runs(engine, "SELECT count(DISTINCT pid) FROM x1_runs WHERE kind = 'done'")
    assert pids == 2  # the 200 counted are both children's, summed
    samples = _scrape(metrics_url)
    assert _sample(samples, "alkstore_worker_claimed_total", queue="x1") == len(ids)
    assert _sample(samples, "alkstore_worker_job_duration_seconds_count", queue="x1") == len(ids)
    assert _sample(samples, "alkstore_worker_processes") == 2
    assert _sample(samples, "alkstore_queue_jobs", queue="x1", state="due") is not None  # gauges

    # A child killed: health turns 503 until it is back; its counts stay in the sum.
    victim = next(iter(children))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: _get(health_url)[0] == 503, every=0.05)
    sup.wait_running(3)
    wait_for(lambda: _get(health_url)[0] == 200, timeout=30, every=0.1)
    samples = _scrape(metrics_url)
    assert _sample(samples, "alkstore_worker_jobs_total", queue="x1", outcome="acked") == len(ids)
    assert _sample(samples, "alkstore_worker_process_restarts") == 1
    code, _ = sup.stop()
    assert code == 0, sup.text()


def test_x1_health_is_503_unless_every_child_is_healthy() -> None:
    good = WorkerHealth(True, 0, 0, None, True, 0)
    child = ChildHealth(0, 10, "h:10:x", True, good, 0.1, 0)
    assert processes_response(ProcessesHealth(True, 2, (child, child._replace(slot=1))))[0] == 200
    for bad in (
        child._replace(alive=False),
        child._replace(health=None),  # no report yet
        child._replace(reported_ago=60.0),  # silent: wedged
        child._replace(health=good._replace(db_errors=1)),
    ):
        status, doc = processes_response(ProcessesHealth(True, 2, (child, bad)))
        assert status == 503 and doc["healthy"] is False
        assert [c["healthy"] for c in doc["children"]] == [True, False]
    assert processes_response(ProcessesHealth(False, 1, (child,)))[0] == 503  # stopping


def _closure() -> object:
    def make() -> Worker:
        raise AssertionError("never called")

    return make


@pytest.mark.parametrize(
    ("factory", "error", "says"),
    [
        (lambda: None, ValueError, "lambda or defined inside a function"),
        (_closure(), ValueError, "lambda or defined inside a function"),
        (functools.partial(lambda: None), ValueError, "lambda"),
        (functools.partial(_x1_app.make_worker, lambda: None), ValueError, "cannot import"),
        ("tests.worker._x1_app:make_worker", TypeError, "a function returning a Worker"),
    ],
)
def test_x1_factory_must_be_importable_by_the_children(
    factory: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error) as caught:
        run_processes(factory, processes=2)  # type: ignore[arg-type]
    assert says in str(caught.value)


@pytest.mark.parametrize("processes", [0, -1, True, 2.5, 10_000])
def test_x1_processes_is_a_whole_number_in_range(processes: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        run_processes(_x1_app.make_worker, processes=processes)  # type: ignore[arg-type]
