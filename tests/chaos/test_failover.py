"""Chaos: the primary dies mid-drain and a promoted streaming standby takes over.

A primary and a streaming standby (``_pair.py``), asynchronous or synchronous
replication.  Two worker processes (a ``Worker`` and an ``AsyncWorker``) and a
producer run on one multi-host URL (primary, standby;
``target_session_attrs=read-write``, ``pool_pre_ping``).  Mid-drain the
primary is stopped in immediate mode (every process quits at once, nothing
more is streamed), the standby is promoted, and the same processes -- their
pools and their LISTEN connections -- carry on against it.

What a failover can cost is measured against ledgers kept outside the
database (the old primary's unstreamed tail is gone, ledger tables with it):

- ``lost``: enqueues whose commit returned to the producer and of which the
  new primary knows nothing (no row, live or dead, and no committed effect);
- ``acks_undone``: jobs whose ack COMMIT returned on the old primary and
  that ran again on the new one (the ack was not streamed: a duplicate).

With synchronous replication a commit returns only once the standby has the
WAL: both are 0, asserted.  With asynchronous replication they are what the
run measured (streaming on one machine lags by little, so often 0): reported.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from alkstore_sa import QueueOpts, Store
from alkstore_sa.migrations._config import alembic_config

from ._pair import Pair
from .conftest import Proc, report, start_process

pytestmark = pytest.mark.chaos

WORKER = Path(__file__).resolve().parent / "_failover_worker.py"
DB = "alkstore_failover"
QUEUE = "failover"
BACKLOG = 3000
DETECT = 1.0  # seconds between the kill and the promotion

EFFECTS = """
CREATE TABLE failover_effects (
    token text NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)
"""
LISTEN_BACKENDS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'alkstore %'
  AND query LIKE 'LISTEN %'
"""


@pytest.fixture(params=["async", "sync"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    p = Pair(sync=request.param == "sync")
    try:
        p.start_primary()
        with psycopg.connect(p.primary.conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        command.upgrade(alembic_config(url=p.node_url(p.primary, DB)), "head")
        engine = create_engine(p.node_url(p.primary, DB), poolclass=NullPool)
        with engine.begin() as conn:
            conn.exec_driver_sql(EFFECTS)
        engine.dispose()
        yield p
    finally:
        p.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """The test's worker processes; any still running at the end is killed."""
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait()


class Producer(threading.Thread):
    """Enqueues one job at a time (``p<n>`` tokens) until stopped; keeps the acked tokens.

    An enqueue that raised is in doubt (its commit may have happened): its
    token is never counted as acked, and the next one is a new token.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.queue = Store(engine).queue(QUEUE, QueueOpts(visibility_timeout=2.0))
        self.acked: list[str] = []
        self.acked_at: list[float] = []
        self.failed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            token = f"p{n}"
            n += 1
            try:
                self.queue.enqueue(token.encode())
            except Exception:  # the primary is gone, or not promoted yet: next token
                self.failed += 1
                time.sleep(0.05)
                continue
            self.acked.append(token)
            self.acked_at.append(time.monotonic())
            time.sleep(0.005)


def _ledger(path: Path) -> list[tuple[int, int, str]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job_id, attempt, token = line.split()
        rows.append((int(job_id), int(attempt), token))
    return rows


def _spawn(tmp: Path, cfg: dict[str, object], i: int) -> Proc:
    return start_process(WORKER, cfg, tmp / f"failover-worker-{i}.log")


def _wait(done: object, timeout: float, what: str, step: float = 0.05) -> float:
    start = time.monotonic()
    while True:
        try:
            if done():  # type: ignore[operator]
                return time.monotonic() - start
        except Exception:  # the server is away: keep polling
            pass
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not done after {timeout}s")
        time.sleep(step)


@pytest.mark.timeout(180)
def test_chaos_failover_to_promoted_standby_workers_and_producers_follow(
    pair: Pair, procs: list[Proc], tmp_path: Path
) -> None:
    mode = "sync" if pair.sync else "async"
    url = pair.url(DB)
    url_text = url.render_as_string(hide_password=False)
    seed = create_engine(url, poolclass=NullPool)
    backlog = [f"b{i}" for i in range(BACKLOG)]
    queue = Store(seed).queue(QUEUE, QueueOpts(visibility_timeout=2.0))
    for start in range(0, BACKLOG, 1000):
        queue.enqueue_many([t.encode() for t in backlog[start : start + 1000]])
    pair.start_standby()  # a copy with the backlog in it, streaming from here on

    primary = create_engine(pair.node_url(pair.primary, DB), poolclass=NullPool)
    standby = create_engine(pair.node_url(pair.standby, DB), poolclass=NullPool)

    def scalar(engine: Engine, sql: str) -> int:
        with engine.connect() as conn:
            return int(conn.execute(text(sql)).scalar() or 0)

    cfg = {"url": url_text, "queue": QUEUE, "concurrency": 8, "work_ms": 4}
    procs += [
        _spawn(
            tmp_path,
            {**cfg, "async": i == 1, "runs": str(tmp_path / f"runs-{i}"),
             "acks": str(tmp_path / f"acks-{i}")},
            i,
        )
        for i in range(2)
    ]  # fmt: skip
    producer = Producer(create_engine(url, pool_pre_ping=True, pool_size=2))
    producer.start()
    try:
        _wait(lambda: scalar(primary, "SELECT count(*) FROM failover_effects") >= 500, 60, "drain")
        assert scalar(primary, "SELECT count(*) FROM alkstore.jobs") > 300, "drained too soon"
        _wait(lambda: scalar(primary, LISTEN_BACKENDS) == 2, 30, "both listeners up")

        killed = time.monotonic()
        pair.kill_primary()
        time.sleep(DETECT)  # a failover manager's detection delay, shortened
        pair.promote_standby()
        promoted = time.monotonic()
        at_promotion = len(producer.acked)
        effects_then = scalar(standby, "SELECT count(*) FROM failover_effects")
        first_effect = _wait(
            lambda: scalar(standby, "SELECT count(*) FROM failover_effects") > effects_then,
            60,
            "first ack on the new primary",
            step=0.02,
        )
        _wait(lambda: len(producer.acked) >= at_promotion + 50, 30, "producer after failover")
    finally:
        producer.stopping.set()
        producer.join(30)
        producer.engine.dispose()
    _wait(lambda: scalar(standby, "SELECT count(*) FROM alkstore.jobs") == 0, 60, "drain after")
    drained = time.monotonic() - promoted
    _wait(lambda: scalar(standby, LISTEN_BACKENDS) == 2, 30, "listeners on the new primary")
    assert all(p.popen.poll() is None for p in procs), "a worker died in the failover"
    for proc in procs:
        proc.stop()

    with standby.connect() as conn:
        rows = conn.execute(text("SELECT token, count(*) FROM failover_effects GROUP BY 1"))
        effects = collections.Counter(dict(rows.all()))
        dead = {
            bytes(p).decode()
            for p in conn.execute(text("SELECT payload FROM alkstore.dead_jobs")).scalars()
        }
    acked = backlog + producer.acked
    lost = [t for t in acked if t not in effects and t not in dead]
    runs = collections.Counter(t for i in range(2) for _, _, t in _ledger(tmp_path / f"runs-{i}"))
    ack_lines = [row for i in range(2) for row in _ledger(tmp_path / f"acks-{i}")]
    ack_count = collections.Counter(t for _, _, t in ack_lines)
    acks_undone = sorted(t for t, n in ack_count.items() if n > 1)
    lost_ran = [t for t in lost if t in ack_count]
    duplicate_effects = sum(n - 1 for n in effects.values() if n > 1)
    reruns = sum(n - 1 for n in runs.values() if n > 1)
    report(
        f"failover-{mode}: acked_enqueues={len(acked)} (during the run={len(producer.acked)}) "
        f"lost_acked_enqueues={len(lost)} "
        f"(of which ran and acked on the old primary={len(lost_ran)}) "
        f"acks_undone(duplicates)={len(acks_undone)} reruns={reruns} "
        f"duplicate_effects={duplicate_effects} dead={len(dead)} "
        f"enqueues_failed_during_failover={producer.failed} "
        f"kill_to_promoted={promoted - killed:.2f}s first_ack_after_promote={first_effect:.2f}s "
        f"drain_after_promote={drained:.1f}s"
    )
    for proc in procs:
        log = proc.log_text()
        assert "listener reconnected" in log, log[-3000:]
    assert duplicate_effects == 0  # Q28 on the surviving timeline
    assert not dead
    if pair.sync:
        # A commit returned only once the standby had flushed it.
        assert lost == []
        assert acks_undone == []
