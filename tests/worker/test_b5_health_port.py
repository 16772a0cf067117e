"""B5's HTTP side: `alkstore worker --health-port N` serves GET /healthz, 200 with the
worker's health as JSON while `health().healthy`, 503 otherwise."""

from __future__ import annotations

import json
import socket
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import Store, Worker, WorkerHealth
from alkstore_sa._extras.health import HealthServer, health_response

from .._workers import wait_for
from ..cli.test_cli import alkstore, one_line_error
from ..cli.test_o8_cli import _usage_error
from ..rules.test_b4_prometheus import _popen, served_url, stop

KEYS = ["healthy", "running", "busy", "stuck", "last_claim_at", "listener_connected", "db_errors"]


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


_APP = """
import os, time
from alkstore_sa import Store, Worker

store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])

def work(job):
    time.sleep(float(job.payload))

worker = Worker({store.queue("jobs"): work}, poll_interval=0.1)
"""


def test_b5_cli_worker_health_port_answers_200_and_json_while_running(
    database_url: URL, store_on: Store, tmp_path: Path
) -> None:
    (tmp_path / "b5app.py").write_text(textwrap.dedent(_APP))
    proc = _popen(database_url, "worker", "b5app:worker", "--health-port", "0", cwd=tmp_path)
    try:
        url = served_url(proc, "worker health")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/healthz")
        # Served from before the run starts (503, not running) until it stops.
        _, headers, body = wait_for(lambda: (r := _get(url))[0] == 200 and r, every=0.05)
        assert headers["Content-Type"] == "application/json"
        doc = json.loads(body)
        assert list(doc) == KEYS
        assert doc["healthy"] is True and doc["running"] is True
        assert doc["stuck"] == 0 and doc["db_errors"] == 0
        # A handler running shows as busy; the last claim is a recent UTC time.
        store_on.queue("jobs").enqueue(b"0.4")
        busy = wait_for(lambda: json.loads(_get(url)[2])["busy"] == 1, every=0.05)
        assert busy
        last = datetime.fromisoformat(json.loads(_get(url)[2])["last_claim_at"])
        assert abs((datetime.now(UTC) - last).total_seconds()) < 60
        assert _get(url, "HEAD")[0] == 200
        assert _get(url.replace("/healthz", "/nope"))[0] == 404
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("health", "status"),
    [
        (WorkerHealth(True, 2, 0, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), True, 0), 200),
        (WorkerHealth(True, 2, 1, None, True, 0), 503),  # a handler stuck past job_timeout
        (WorkerHealth(True, 0, 0, None, False, 3), 503),  # database calls failing
        (WorkerHealth(False, 0, 0, None, False, 0), 503),  # not started, stopping or stopped
        (WorkerHealth(True, 0, 0, None, False, 0), 200),  # LISTEN down alone: polls still work
    ],
)
def test_b5_health_handler_answers_the_workers_health(health: WorkerHealth, status: int) -> None:
    with HealthServer(lambda: health, "127.0.0.1", 0) as server:
        got, headers, body = _get(server.url)
    assert got == status == health_response(health)[0]
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["healthy"] is (status == 200) and list(doc) == KEYS
    assert doc["stuck"] == health.stuck and doc["db_errors"] == health.db_errors
    expected_at = None if health.last_claim_at is None else health.last_claim_at.isoformat()
    assert doc["last_claim_at"] == expected_at


def test_b5_health_of_a_worker_not_running_is_503(store: Store) -> None:
    worker = Worker({store.queue("idle"): lambda job: None})
    with HealthServer(worker.health, "127.0.0.1", 0) as server:
        status, _, body = _get(server.url)
    assert status == 503 and json.loads(body)["running"] is False


def test_b5_health_that_cannot_be_read_is_503_not_a_dropped_connection() -> None:
    def broken() -> Any:
        raise RuntimeError("no run state")

    with HealthServer(broken, "127.0.0.1", 0) as server:
        status, _, body = _get(server.url)
    assert status == 503 and json.loads(body) == {"healthy": False, "error": "no run state"}


def test_b5_cli_health_port_errors_are_one_line(database_url: URL) -> None:
    assert "a port is 0..65535" in _usage_error(
        alkstore("worker", "examples.tasks:worker", "--health-port", "99999", url=database_url)
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = alkstore(
            "worker", "examples.tasks:worker", "--health-port", str(port), url=database_url
        )
    line = one_line_error(proc, 1)
    assert line.startswith(f"alkstore: cannot serve /healthz on 127.0.0.1:{port}: ")
