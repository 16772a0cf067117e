"""G1 across worker processes: no step starts before every step it comes after was
acked (start times logged by the handlers, ack times kept by R1, compared in SQL);
a wide fan-in runs exactly once; kill -9 of workers mid-workflow loses nothing.
Sizes: ``tests/_wf_sizes.py`` (``ALKSTORE_FULL_SIZES=1``: the issue's)."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import URL, Engine, text

from alkstore_sa import EnqueueOpts, Store, Workflow

from .._wf_sizes import SIZES

WORKER = Path(__file__).with_name("_wf_worker.py")
KEEP = EnqueueOpts(keep_completed=3600)

# Every edge whose step started before its upstream was acked (or whose
# upstream never was): must be none.
EARLY = text(
    """
    SELECT e.upstream, e.step
    FROM alkstore.workflow_edges e
    JOIN wf_starts s ON s.job_id = e.step
    LEFT JOIN alkstore.completed_jobs u ON u.id = e.upstream
    WHERE u.finished_at IS NULL OR s.at < u.finished_at
    """
)


def _setup(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE wf_starts (job_id bigint, pid int, at timestamptz)"))


def _build(store: Store, queue: str, fan: int, chain: int) -> list[int]:
    q = store.queue(queue)
    runs = []
    diamond = Workflow(store, name="diamond")
    a = diamond.add_job(q, b"a", opts=KEEP)
    b = diamond.add_job(q, b"b", after=[a], opts=KEEP)
    c = diamond.add_job(q, b"c", after=[a], opts=KEEP)
    diamond.add_job(q, b"d", after=[b, c], opts=KEEP)
    runs.append(diamond.defer().id)
    wide = Workflow(store, name="fan")
    root = wide.add_job(q, b"root", opts=KEEP)
    middle = [wide.add_job(q, b"m", after=[root], opts=KEEP) for _ in range(fan)]
    wide.add_job(q, b"last", after=middle, opts=KEEP)
    runs.append(wide.defer().id)
    line = Workflow(store, name="chain")
    steps = [line.add_job(q, b"0", opts=KEEP)]
    for _ in range(chain):
        steps.append(line.add_job(q, b"n", after=[steps[-1]], opts=KEEP))
    runs.append(line.defer().id)
    return runs


def _spawn(url: URL, kind: str, queue: str, vt: float) -> subprocess.Popen[bytes]:
    dsn = url.render_as_string(hide_password=False)
    return subprocess.Popen([sys.executable, str(WORKER), dsn, kind, queue, str(vt)])


def _finished(store: Store, runs: list[int]) -> bool:
    return all((s := store.workflow(r)) is not None and s.finished for r in runs)


def _check(engine: Engine, store: Store, runs: list[int]) -> None:
    for run in runs:
        status = store.workflow(run)
        assert status is not None
        assert (status.completed, status.dead) == (status.total, 0)
    with engine.connect() as conn:
        assert conn.execute(EARLY).all() == []
        never = conn.execute(
            text(
                "SELECT count(*) FROM alkstore.workflow_steps w "
                "WHERE NOT EXISTS (SELECT 1 FROM wf_starts s WHERE s.job_id = w.id)"
            )
        ).scalar_one()
        assert never == 0


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_g1_order_holds_across_worker_processes(database_url: URL, engine: Engine) -> None:
    _setup(engine)
    with Store(engine) as store:
        runs = _build(store, "g1order", fan=SIZES.procs_fan, chain=SIZES.procs_chain)
        procs = [_spawn(database_url, kind, "g1order", 30) for kind in ("sync", "async", "sync")]
        try:
            began = deadline = time.monotonic()
            deadline += SIZES.deadline
            while not _finished(store, runs):
                assert time.monotonic() < deadline, "the workflows did not finish"
                time.sleep(0.1)
        finally:
            print(f"finished in {time.monotonic() - began:.1f}s")
            _stop(procs)
        _check(engine, store, runs)
        with engine.connect() as conn:
            fan_in_runs = conn.execute(
                text(
                    "SELECT count(*) FROM wf_starts s JOIN alkstore.workflow_steps w "
                    "ON w.id = s.job_id WHERE w.workflow_id = :w AND w.id = "
                    "(SELECT max(id) FROM alkstore.workflow_steps WHERE workflow_id = :w)"
                ),
                {"w": runs[1]},
            ).scalar_one()
        assert fan_in_runs == 1


def test_g1_kill_9_of_workers_mid_workflow_loses_nothing(database_url: URL, engine: Engine) -> None:
    _setup(engine)
    vt = 0.6  # a killed worker's jobs lapse and run again soon
    with Store(engine) as store:
        runs = _build(store, "g1kill", fan=SIZES.procs_fan, chain=SIZES.kill_chain)
        procs = [_spawn(database_url, "sync", "g1kill", vt) for _ in range(3)]
        kills = 0
        began = time.monotonic()
        try:
            deadline = began + SIZES.deadline
            next_kill = time.monotonic() + 0.7
            while not _finished(store, runs):
                assert time.monotonic() < deadline, "the workflows did not finish"
                if time.monotonic() >= next_kill and kills < 4:
                    i = random.randrange(len(procs))
                    procs[i].kill()
                    procs[i].wait()
                    procs[i] = _spawn(database_url, "sync", "g1kill", vt)
                    kills += 1
                    next_kill = time.monotonic() + 0.7
                time.sleep(0.05)
        finally:
            print(f"{kills} kills, finished in {time.monotonic() - began:.1f}s")
            _stop(procs)
        assert kills >= 1
        _check(engine, store, runs)
