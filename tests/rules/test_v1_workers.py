"""V1: the registry of workers, across real worker processes.

Each worker process registers itself (id, host, pid, queues, concurrency,
version), refreshes its row, is removed at a graceful stop, and -- killed
with SIGKILL -- stops refreshing, so once its row is 60 s old it is shown as
gone.  Waiting a real minute is too slow for a test: the row's age is set
in SQL (``last_seen`` moved back), after checking that the killed worker's
row no longer moves while the live ones' do.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import URL, text

import alkstore_sa
from alkstore_sa import Store, WorkerInfo
from alkstore_sa._db.sql.workers import PRUNE_AFTER, REFRESH_INTERVAL, STALE_AFTER

from .._drivers import async_url
from .._workers import KINDS, wait_for

SCRIPT = Path(__file__).with_name("_v1_worker.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


class Procs:
    def __init__(self, url: URL, tmp: Path) -> None:
        self.url = url
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, kind: str, queues: list[str], concurrency: int) -> subprocess.Popen[str]:
        cfg = {
            "url": self.url.render_as_string(hide_password=False),
            "kind": kind,
            "queues": queues,
            "concurrency": concurrency,
        }
        log = open(self.tmp / f"worker-{len(self.procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), json.dumps(cfg)],
            stderr=log,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def procs(database_url: URL, tmp_path: Path) -> Iterator[Procs]:
    p = Procs(database_url, tmp_path)
    yield p
    p.close()


def _by_pid(store: Store) -> dict[int, WorkerInfo]:
    return {w.pid: w for w in store.workers()}


def test_v1_registry_constants_follow_the_rule() -> None:
    assert REFRESH_INTERVAL <= 10
    assert timedelta(seconds=60) == STALE_AFTER
    assert PRUNE_AFTER > STALE_AFTER


def test_v1_worker_processes_register_refresh_and_leave(
    store_on: Store, procs: Procs, database_url: URL
) -> None:
    # Three processes, both faces, idle ones included: each is listed with its queues.
    faces = ["sync", KINDS[-1], "sync"]
    layout = [(["alpha", "beta"], 3), (["beta"], 2), (["gamma"], 1)]
    started = [procs.start(kind, q, c) for kind, (q, c) in zip(faces, layout, strict=True)]
    pids = [p.pid for p in started]
    seen = wait_for(
        lambda: (w := _by_pid(store_on)).keys() >= set(pids) and w, timeout=60, every=0.2
    )
    for pid, (queues, concurrency) in zip(pids, layout, strict=True):
        info = seen[pid]
        assert info.alive and info.queues == tuple(queues) and info.concurrency == concurrency
        assert info.hostname == socket.gethostname()
        assert info.version == alkstore_sa.__version__
        assert info.in_flight == ()  # idle, and listed all the same
        assert info.started_at <= info.last_seen
    # A job in flight is listed under the worker that holds it.
    job_id = store_on.queue("gamma").enqueue(b"hold")
    holder = wait_for(
        lambda: _by_pid(store_on)[pids[2]].in_flight == (job_id,), timeout=30, every=0.2
    )
    assert holder
    # Refreshed: last_seen moves forward within the refresh interval.
    before = _by_pid(store_on)
    time.sleep(REFRESH_INTERVAL + 1.5)
    after = _by_pid(store_on)
    for pid in pids:
        assert after[pid].last_seen > before[pid].last_seen
        assert after[pid].started_at == before[pid].started_at
    # A graceful stop removes the row.
    started[0].send_signal(signal.SIGTERM)
    assert started[0].wait(timeout=30) == 0
    assert pids[0] not in _by_pid(store_on)
    # kill -9: the row stays but stops moving while the others' move on.
    started[1].kill()
    started[1].wait(timeout=30)
    frozen = _by_pid(store_on)[pids[1]].last_seen
    time.sleep(REFRESH_INTERVAL + 1.5)
    now = _by_pid(store_on)
    assert now[pids[1]].last_seen == frozen and now[pids[1]].alive  # not 60 s yet
    assert now[pids[2]].last_seen > frozen
    # Move every row a minute and a second back: the live worker's next refresh
    # brings its own row back, the killed one's stays old -- shown as gone.
    with store_on.engine.begin() as conn:
        conn.execute(text("UPDATE alkstore.workers SET last_seen = last_seen - interval '61 s'"))
    wait_for(lambda: _by_pid(store_on)[pids[2]].alive, timeout=REFRESH_INTERVAL + 10, every=0.2)
    gone = _by_pid(store_on)[pids[1]]
    assert not gone.alive and gone.last_seen == frozen - timedelta(seconds=61)
    # Past the prune window a refresh of any worker on the schema deletes it.
    with store_on.engine.begin() as conn:
        conn.execute(
            text("UPDATE alkstore.workers SET last_seen = last_seen - :age WHERE pid = :pid"),
            {"age": PRUNE_AFTER, "pid": pids[1]},
        )
    assert pids[1] not in _by_pid(store_on)  # the listing hides it at once
    wait_for(lambda: _count_rows(store_on, pids[1]) == 0, timeout=REFRESH_INTERVAL + 10, every=0.2)
    assert list(_by_pid(store_on)) == [pids[2]]


def _count_rows(store: Store, pid: int) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM alkstore.workers WHERE pid = :pid"), {"pid": pid}
            ).scalar_one()
        )


@pytest.mark.parametrize("face", KINDS)
def test_v1_store_workers_on_both_faces(store_on: Store, database_url: URL, face: str) -> None:
    with store_on.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.workers (worker_id, hostname, pid, queues, concurrency, "
                "version, started_at, last_seen) VALUES "
                "('w-live', 'h1', 11, ARRAY['a','b'], 4, '9.9', now() - interval '5 min', "
                "now() - interval '59 s'), "
                "('w-gone', 'h2', 12, ARRAY['a'], 1, '9.9', now() - interval '9 min', "
                "now() - interval '61 s'), "
                "('w-pruned', 'h3', 13, ARRAY['a'], 1, '9.9', now() - interval '1 h', "
                "now() - interval '16 min')"
            )
        )
    q = store_on.queue("a")
    q.enqueue(b"x")
    q.enqueue(b"y")
    first = q.claim_one("w-live")
    second = q.claim_one("w-live")
    assert first is not None and second is not None
    if face == "sync":
        found = store_on.workers()
    else:
        import asyncio

        from alkstore_sa import AsyncStore

        async def read() -> list[WorkerInfo]:
            async with AsyncStore.from_url(async_url(database_url, face)) as astore:
                return await astore.workers()

        found = asyncio.run(read())
    assert [(w.worker_id, w.alive) for w in found] == [("w-gone", False), ("w-live", True)]
    live = found[1]
    assert live.queues == ("a", "b") and live.concurrency == 4 and live.pid == 11
    assert live.in_flight == (first.job.id, second.job.id)
    assert found[0].in_flight == ()


def _register_rows(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.workers (worker_id, hostname, pid, queues, concurrency, "
                "version, last_seen) VALUES "
                "('a1', 'h', 1, ARRAY['q'], 1, '0', now()), "
                "('a2', 'h', 2, ARRAY['q'], 1, '0', now() - interval '10 s'), "
                "('g1', 'h', 3, ARRAY['q'], 1, '0', now() - interval '2 min')"
            )
        )


def test_v1_prometheus_gauge_counts_live_and_gone_workers(store_on: Store) -> None:
    prom = pytest.importorskip("alkstore_sa.prometheus")
    from prometheus_client import CollectorRegistry

    _register_rows(store_on)
    registry = CollectorRegistry()
    registry.register(prom.StoreCollector(store_on, cache_seconds=0))
    assert registry.get_sample_value("alkstore_workers", {"state": "alive"}) == 2.0
    assert registry.get_sample_value("alkstore_workers", {"state": "gone"}) == 1.0


def test_v1_cli_workers_lists_them(store_on: Store, database_url: URL) -> None:
    from ..cli.test_cli import alkstore

    assert alkstore("workers", url=database_url).stdout.startswith("no workers registered")
    _register_rows(store_on)
    job = store_on.queue("q").enqueue(b"x")
    assert store_on.queue("q").claim_one("a1") is not None
    proc = alkstore("workers", "--json", url=database_url)
    assert proc.returncode == 0, proc.stderr
    listed = {w["worker_id"]: w for w in json.loads(proc.stdout)}
    assert set(listed) == {"a1", "a2", "g1"}
    assert listed["a1"]["alive"] and listed["a1"]["in_flight"] == [job]
    assert not listed["g1"]["alive"] and listed["g1"]["queues"] == ["q"]
    table = alkstore("workers", url=database_url).stdout.splitlines()
    assert table[0].split()[:4] == ["worker", "host", "pid", "state"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert " running " in rows["a1"] and f"1 ({job})" in rows["a1"]
    assert " gone " in rows["g1"]
