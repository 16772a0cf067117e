"""Workflows (G1-G4): `--only workflow-waiting,workflow-drain` (cases WW, WD).

``waiting`` (WW): ``steps`` waiting workflow steps, made by ``Workflow.defer``
in workflows of at most 10,000 steps (G4's cap): each a root on a queue of
its own (``wfw-roots``, never claimed, so every other step keeps waiting)
and the rest after it on ``wfw``.  Then ``claim_one`` + ack on ``wfw`` (due
jobs beside the waiting steps) and on ``wfe`` (a queue with no step), in
alternating rounds, ``claims`` each: the claim's p50 beside the steps vs on
the queue without them.  A waiting step is a row of ``workflow_steps``, not
of ``jobs``, so no claim reads it; the figure checks that.  Beside it, for
reference, the same claim measured before any step existed, and an empty
claim (nothing due) on ``wfw`` vs on ``wfe``.

``drain`` (WD): a fan-out/fan-in of ``steps`` steps (a root, ``steps - 2``
after it, one after all of those) drained by one ``Worker`` (D2's shape:
concurrency 10, no-op handler), timed from ``run()`` to the last step's
ack; beside it D2 on ``steps`` plain jobs, alternated ``rounds`` times.
"""

from __future__ import annotations

import statistics
import threading
import time

from sqlalchemy import create_engine, text

from alkstore_sa import Job, Store, Worker, Workflow

from . import _db, _worker
from ._db import Database
from ._progress import Bar
from ._report import Figure, Figures, Target

__all__ = ["MAX_STEPS", "drain", "targets", "waiting"]

MAX_STEPS = 10_000  # G4: steps per workflow
ROUNDS = 10  # WW: alternating claim rounds per side (drift on a loaded machine hits both)


def _reset(db: Database) -> None:
    with db.connect() as conn:
        conn.execute(
            "TRUNCATE alkstore.jobs, alkstore.dead_jobs, alkstore.completed_jobs,"
            " alkstore.workflows, alkstore.workflow_steps, alkstore.workflow_edges"
        )


def _store(db: Database, pool: int = 4) -> Store:
    return Store(create_engine(db.sa_url(), pool_size=pool, max_overflow=4))


def _make_waiting(store: Store, steps: int, label: str) -> int:
    """``steps`` waiting steps on ``wfw``; how many ``workflow_steps`` says wait."""
    roots, q = store.queue("wfw-roots"), store.queue("wfw")
    bar = Bar(label + " (defer)", steps)
    left = steps
    while left:
        size = min(left, MAX_STEPS - 1)
        wf = Workflow(store, name="bench-waiting")
        root = wf.add_job(roots, b"r")
        for _ in range(size):
            wf.add_job(q, b"s", after=[root])
        wf.defer()
        left -= size
        bar.advance(size)
    bar.close()
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM alkstore.workflow_steps WHERE state = 'waiting'")
            ).scalar_one()
        )


def _claims(store: Store, queue: str, n: int) -> list[float]:
    """``n`` times ``claim_one`` then ack on ``queue`` (filled with ``n`` due jobs
    first); the claims' wall times."""
    q = store.queue(queue)
    q.enqueue_many([b"x" * 16] * n)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        h = q.claim_one("bench")
        out.append(time.perf_counter() - t0)
        if h is None or not h.ack():
            raise RuntimeError(f"WW: a claim on {queue!r} found nothing or lost its job")
    return out


def _empty_claims(store: Store, queue: str, n: int) -> list[float]:
    q = store.queue(queue)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        if q.claim_one("bench") is not None:
            raise RuntimeError(f"WW: an empty claim on {queue!r} found a job")
        out.append(time.perf_counter() - t0)
    return out


def _fig(shape: str, samples: list[float], extra: dict[str, float] | None = None) -> Figure:
    cuts = statistics.quantiles(samples, n=100)
    ms = {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000, **(extra or {})}
    return Figure("WW", "alkstore", shape, len(samples), sum(samples), ms)


def waiting(db: Database, steps: int, claims: int, label: str) -> list[Figure]:
    _reset(db)
    store = _store(db)
    try:
        before = _claims(store, "wfe", claims)  # nothing but this queue's jobs yet
        made = _make_waiting(store, steps, label)
        if made != steps:
            raise RuntimeError(f"{label}: {made} steps waiting, not {steps}")
        _db.vacuum(db, "alkstore.jobs", "alkstore.workflow_steps")
        beside: list[float] = []
        alone: list[float] = []
        per = max(claims // ROUNDS, 2)
        bar = Bar(label + " (claims)", 2 * per * ROUNDS)
        for r in range(ROUNDS):
            for queue in ("wfw", "wfe") if r % 2 == 0 else ("wfe", "wfw"):
                (beside if queue == "wfw" else alone).extend(_claims(store, queue, per))
                bar.advance(per)
        bar.close()
        empty_beside = _empty_claims(store, "wfw", per)
        empty_alone = _empty_claims(store, "wfe", per)
    finally:
        store.engine.dispose()
    n = {"waiting_steps": float(made)}
    return [
        _fig("claim, no step yet (ref.)", before),
        _fig("claim, queue without steps", alone, n),
        _fig("claim beside waiting steps", beside, n),
        _fig("empty claim, queue without steps", empty_alone, n),
        _fig("empty claim beside waiting steps", empty_beside, n),
    ]


def _drain_workflow(db: Database, steps: int, label: str) -> Figure:
    _reset(db)
    engine = create_engine(db.sa_url(), pool_size=_worker.CONCURRENCY + 4, max_overflow=4)
    store = Store(engine)
    q = store.queue("wfd")
    wf = Workflow(store, name="bench-drain")
    root = wf.add_job(q, b"r")
    middle = [wf.add_job(q, b"m", after=[root]) for _ in range(steps - 2)]
    wf.add_job(q, b"s", after=middle)
    run = wf.defer()
    bar = Bar(label, steps)
    done = [0]
    lock = threading.Lock()
    finished = threading.Event()

    def noop(job: Job) -> None:
        with lock:
            done[0] += 1
            if done[0] % 100 == 0 or done[0] == steps:
                bar.set(done[0])
            if done[0] == steps:
                finished.set()

    worker = Worker(
        {q: noop}, concurrency=_worker.CONCURRENCY, poll_interval=1.0, handle_signals=False
    )
    t0 = time.perf_counter()
    thread = threading.Thread(target=worker.run, name="bench-wf-worker")
    thread.start()
    try:
        if not finished.wait(timeout=600):
            raise RuntimeError(f"{label}: ran {done[0]} of {steps} steps in 600 s")
        t1 = _worker._wait_empty(db, "wfd")
    finally:
        worker.stop()
        thread.join(timeout=60)
    status = store.workflow(run.id)
    engine.dispose()
    if status is None or (status.completed, status.finished) != (steps, True):
        raise RuntimeError(f"{label}: the workflow ended as {status!r}")
    bar.close(rate=steps / (t1 - t0))
    shape = f"fan-out/fan-in, 1 Worker c={_worker.CONCURRENCY}"
    return Figure("WD", "alkstore-workflow", shape, steps, t1 - t0)


def drain(db: Database, steps: int, rounds: int, label: str) -> list[Figure]:
    """Alternated: the workflow, then D2 on as many plain jobs (the other way round
    every second round)."""
    out = []
    for r in range(rounds):
        for kind in ("workflow", "plain") if r % 2 == 0 else ("plain", "workflow"):
            lb = f"{label} round {r + 1} {kind}"
            if kind == "workflow":
                out.append(_drain_workflow(db, steps, lb))
                continue
            _reset(db)
            fig = _worker.d2(db, steps, lb)
            out.append(Figure("WD", "alkstore-plain", f"D2, {fig.shape}", fig.jobs, fig.seconds))
    return out


def _sum(figs: Figures, system: str) -> tuple[int, float]:
    mine = [f for f in figs.items if f.case == "WD" and f.system == system]
    return sum(f.jobs for f in mine), sum(f.seconds for f in mine)


def targets(figs: Figures) -> list[Target]:
    out = []
    beside = figs.find("WW", "alkstore", "claim beside")
    alone = figs.find("WW", "alkstore", "claim, queue without")
    if beside is not None and alone is not None:
        ratio = beside.extra["p50_ms"] / alone.extra["p50_ms"]
        rule = "<= 1.25 x the claim's p50 on a queue without steps"
        out.append(Target("WW claim p50 beside waiting", rule, ratio, 1.25, False))
    wf_jobs, wf_s = _sum(figs, "alkstore-workflow")
    plain_jobs, plain_s = _sum(figs, "alkstore-plain")
    if wf_jobs and plain_jobs:
        ratio = (wf_jobs / wf_s) / (plain_jobs / plain_s)
        rule = ">= 0.5 x D2 on as many plain jobs"
        out.append(Target("WD fan-out/fan-in vs D2", rule, ratio, 0.5, True))
    return out
