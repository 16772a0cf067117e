"""R3 under kill -9: waiters on kept jobs return even when the ack's notification never comes.

Issue 27's chaos case: worker processes drain jobs stamped with
``keep_completed`` (R1) while they are SIGKILLed, or have the server backend
of their connection terminated, in the middle of a kept job's ack -- after
the ack statement started (it moves the row to ``completed_jobs`` and queues
the done channel's NOTIFY) and before its COMMIT (which would deliver the
NOTIFY).  Such an ack rolls back and no notification is ever sent for it.
A SIGKILLed worker's claims lapse (Q11) and are reclaimed; a terminated
backend fails the ack's statement in a live worker, which retries the job
like any handler error (Q17; the workers' curve is capped at 1 s, so a job
cut again and again does not wait out a doubling delay -- 64 s by its
seventh attempt -- and the faults stop before the last few jobs, which they
would otherwise hit every time).

Meanwhile the test process waits on every job with ``q.wait`` (R3), on both
faces (threads on a ``Store``, tasks on an ``AsyncStore``), and half of the
waiters are deaf: their stores reach PostgreSQL through the chaos proxy,
which blackholes their shared LISTEN connection once it is up (open and
silent: no reset, so the listener never learns and never reconnects;
nothing wakes them but the re-poll).  The other waiters' LISTEN backends are
terminated every 1.5 s, losing the notifications of acks committed while
they reconnect.

A statement trigger on ``completed_jobs`` makes each kept ack sleep 0-30 ms
inside its statement, so the test sees acks in flight in
``pg_stat_activity`` and aims its faults at them.

What must hold: every waiter returns the completed ``Job`` with its result
(none times out); every job is completed exactly once, with one committed
effect (a run cut before its commit left none and ran again); and every
waiter returned within the 1 s re-poll (plus slack for a loaded machine) of
its job's ``finished_at`` -- the deaf ones too, whose LISTEN the server did
notify (the proxy holds what it sent) and which no notification reached.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from alkstore_sa import AsyncStore, Job, QueueOpts, Store

from .._workers import wait_for
from ._proxy import Proxy
from .conftest import Chaos, Proc, report

pytestmark = pytest.mark.chaos
PROXY_SEED = 27  # the proxy fixture's (conftest.py)

QUEUE = "r3kill"
GROUPS = ("sync", "async", "sync-deaf", "async-deaf")
PER_GROUP = 24
WORKERS = 4
SIGKILLS, TERMINATIONS = 5, 3  # faults aimed at acks in flight, 0.4-0.7 s apart
WAIT_TIMEOUT = 45.0  # generous: a waiter that needs it has stalled
POLL = 1.0  # R3: a waiter re-reads its job at least this often
SLACK = 1.0  # a loaded 2-core machine's scheduling, on top of the poll
OPTS = QueueOpts(visibility_timeout=1.5, max_attempts=20, keep_completed=600)
# A job whose ack a fault cut runs again after at most 1 s (Q17's curve capped):
# uncapped, a job cut at its third attempt would wait 4 s, its sixth 32 s.
WORKER_CFG = {
    "concurrency": 2,
    "poll_interval": 0.2,
    "work_ms": 1600,
    "result": True,
    "queue_opts": {"retry_cap": 1},
}
FAULT_FLOOR = 16  # faults only while this many jobs are live: not the tail's few, again and again

SLOW_ACK = """
CREATE FUNCTION chaos_slow_ack() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(random() * 0.03); RETURN NULL; END $$;
CREATE TRIGGER chaos_slow_ack AFTER INSERT ON alkstore.completed_jobs
FOR EACH STATEMENT EXECUTE FUNCTION chaos_slow_ack();
"""
# A worker's pool connection running a kept ack (not committed yet).
ACKS_IN_FLIGHT = """
SELECT pid, application_name FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'chaos-pool-%'
  AND state = 'active' AND query LIKE '%INSERT INTO alkstore.completed_jobs%'
"""
# The waiters' LISTEN backends, once LISTEN is done.
WAIT_LISTENERS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'alkstore wait'
  AND query LIKE 'LISTEN %' AND state = 'idle'
"""
CUT_LISTENERS = """
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'alkstore wait'
  AND pid <> ALL(CAST(:deaf AS int[]))
"""
COMPLETED = """
SELECT id, result, extract(epoch FROM finished_at) FROM alkstore.completed_jobs
WHERE id = ANY(CAST(:ids AS bigint[]))
"""
RUNS = "SELECT job_id, attempt, pid FROM chaos_runs ORDER BY at"
STUCK = """
SELECT j.id, j.status, j.attempts, j.worker_id,
       extract(epoch FROM j.claim_deadline - clock_timestamp()) AS deadline_in,
       (SELECT count(*) FROM chaos_runs r WHERE r.job_id = j.id) AS runs
FROM alkstore.jobs j WHERE j.queue = :q ORDER BY j.id
"""


@dataclass
class Waited:
    group: str
    job_id: int
    at: float  # time.time() when the wait returned
    outcome: Job | BaseException | None


class AsyncSide:
    """One async group's loop, in a thread of its own, and its store's engine."""

    def __init__(self, url: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="waiters")
        self.thread.start()
        self.engine: AsyncEngine = create_async_engine(url, pool_size=5, max_overflow=10)
        self.store = AsyncStore(self.engine)

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.engine.dispose(), self.loop).result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def _listeners(watch: Connection) -> set[int]:
    return set(watch.execute(text(WAIT_LISTENERS)).scalars())


def _stuck(chaos: Chaos, procs: list[Proc]) -> str:
    """What a stall looks like: the live rows, and the end of each worker's log."""
    with chaos.engine.connect() as conn:
        rows = conn.execute(text(STUCK), {"q": QUEUE}).all()
    tails = "\n".join(
        f"--- worker {p.pid} (exit {p.popen.poll()}):\n"
        + "\n".join(p.log_text().splitlines()[-15:])
        for p in procs
    )
    return f"live rows (id, status, attempts, worker, claim deadline in s, runs): {rows}\n{tails}"


@pytest.mark.timeout(150)
def test_r3_chaos_sigkill_in_kept_acks_waiters_return_by_the_poll(
    chaos: Chaos, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deaf LISTENs stay deaf: no liveness probe (30 s of silence, then 10 s
    # for its answer) finds them blackholed and reconnects within the test.
    monkeypatch.setattr("alkstore_sa.worker._listener.LIVENESS_INTERVAL", 600.0)
    chaos.max_attempts = 20  # OPTS's: the "ran too often" count
    with chaos.engine.begin() as conn:
        conn.exec_driver_sql(SLOW_ACK)
    jobs = PER_GROUP * len(GROUPS)
    ids = chaos.enqueue(QUEUE, jobs, OPTS)
    expected = {job_id: b"done:%d" % i for i, job_id in enumerate(ids)}
    group_of = {job_id: GROUPS[i % len(GROUPS)] for i, job_id in enumerate(ids)}
    with chaos.engine.connect() as conn:  # the server's clock minus ours
        before = time.time()
        server_now = float(
            conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
        )
        offset = server_now - (before + time.time()) / 2

    waited: list[Waited] = []
    sync_engines: list[Engine] = []
    threads: list[threading.Thread] = []
    sides: list[AsyncSide] = []
    futures: list[Any] = []

    def sync_waiters(group: str, url: Any) -> None:
        engine = create_engine(url, pool_size=5, max_overflow=10)
        sync_engines.append(engine)
        q = Store(engine).queue(QUEUE)

        def wait(job_id: int) -> None:
            try:
                outcome: Job | BaseException | None = q.wait(job_id, timeout=WAIT_TIMEOUT)
            except BaseException as exc:  # reported with the job it was for
                outcome = exc
            waited.append(Waited(group, job_id, time.time(), outcome))

        for job_id in (j for j in ids if group_of[j] == group):
            thread = threading.Thread(target=wait, args=(job_id,), daemon=True)
            thread.start()
            threads.append(thread)

    def async_waiters(group: str, url: Any) -> None:
        side = AsyncSide(url)
        sides.append(side)
        q = side.store.queue(QUEUE)

        async def wait(job_id: int) -> None:
            try:
                outcome: Job | BaseException | None = await q.wait(job_id, timeout=WAIT_TIMEOUT)
            except BaseException as exc:  # reported with the job it was for
                outcome = exc
            waited.append(Waited(group, job_id, time.time(), outcome))

        for job_id in (j for j in ids if group_of[j] == group):
            futures.append(asyncio.run_coroutine_threadsafe(wait(job_id), side.loop))

    procs: list[Proc] = []
    watch = chaos.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        # The deaf waiters first: once their two LISTENs are up, the proxy holds
        # those connections open and silent for the rest of the test.
        sync_waiters("sync-deaf", proxy.url(chaos.url))
        async_waiters("async-deaf", proxy.url(chaos.url))
        deaf = wait_for(lambda: s if len(s := _listeners(watch)) == 2 else None, 30, every=0.02)
        time.sleep(0.2)  # LISTEN's reply is back at the client
        holed = proxy.blackhole(lambda c: c.saw("LISTEN"))
        assert len(holed) == 2, [c.statements for c in holed]
        sync_waiters("sync", chaos.url)
        async_waiters("async", chaos.url)
        wait_for(lambda: len(_listeners(watch) - deaf) == 2, 30, every=0.02)

        procs = [chaos.spawn(QUEUE, **WORKER_CFG, **{"async": i % 2 == 1}) for i in range(WORKERS)]
        rng = random.Random(27)
        # The faults, in a random order, each aimed at an ack in flight when its turn comes.
        plan = ["sigkill"] * SIGKILLS + ["terminate"] * TERMINATIONS
        rng.shuffle(plan)
        faults: list[tuple[str, int, float]] = []  # (kind, worker pid, time.time())
        crashed: list[str] = []
        listener_cuts = 0
        start = time.monotonic()
        next_fault = next_cut = start + 1.5
        next_check = start
        live = jobs
        while live > 0 and time.monotonic() - start < 40:
            now = time.monotonic()
            if now >= next_check:
                live = int(
                    watch.execute(
                        text("SELECT count(*) FROM alkstore.jobs WHERE queue = :q"), {"q": QUEUE}
                    ).scalar_one()
                )
                for i, proc in enumerate(procs):
                    if proc.popen.poll() is not None:  # died without our kill
                        crashed.append(f"{proc.pid} exit {proc.popen.returncode}")
                        procs[i] = chaos.spawn(QUEUE, **WORKER_CFG, **{"async": i % 2 == 1})
                next_check = now + 0.05
            if now >= next_cut:
                listener_cuts += int(
                    watch.execute(text(CUT_LISTENERS), {"deaf": sorted(deaf)}).scalar_one()
                )
                next_cut = now + 1.5
            if plan and now >= next_fault and live >= FAULT_FLOOR:
                acking = watch.execute(text(ACKS_IN_FLIGHT)).all()
                if acking:
                    backend, name = rng.choice(acking)
                    worker = int(name.removeprefix("chaos-pool-"))
                    kind = plan.pop()
                    if kind == "sigkill":
                        [i] = [i for i, p in enumerate(procs) if p.pid == worker]
                        procs[i].kill()
                        procs[i] = chaos.spawn(QUEUE, **WORKER_CFG, **{"async": i % 2 == 1})
                    else:
                        watch.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
                    faults.append((kind, worker, time.time()))
                    next_fault = now + rng.uniform(0.4, 0.7)
            time.sleep(0.003)
        try:
            chaos.wait_until(lambda: chaos.live(QUEUE) == 0, timeout=30)
        except AssertionError:
            raise AssertionError("jobs not drained:\n" + _stuck(chaos, procs)) from None
        drained = time.monotonic() - start
        for thread in threads:
            thread.join(WAIT_TIMEOUT)
        for fut in futures:
            fut.result(WAIT_TIMEOUT)
        waited_for = time.monotonic() - start
        holed_closed = sum(1 for c in holed if c.closed)
        notes_held = [c.notes_held for c in holed]
        listen_conns = sum(1 for c in proxy.history if c.saw("LISTEN"))
    finally:
        watch.close()
        for side in sides:
            side.close()
        for engine in sync_engines:
            engine.dispose()
    chaos.stop_all()

    with chaos.engine.connect() as conn:
        completed = {
            int(i): (bytes(r), float(at) - offset)
            for i, r, at in conn.execute(text(COMPLETED), {"ids": ids})
        }
        runs = conn.execute(text(RUNS)).all()
    out = chaos.tally(QUEUE, ids)
    killed = {pid for kind, pid, _ in faults if kind == "sigkill"}
    terminated = {pid for kind, pid, _ in faults if kind == "terminate"}
    runs_of: dict[int, list[int]] = {}
    for job_id, _attempt, pid in runs:
        runs_of.setdefault(job_id, []).append(pid)
    reruns = {j: pids for j, pids in runs_of.items() if len(pids) > 1}
    unexplained = sorted(
        j for j, pids in reruns.items() if not set(pids[:-1]) & (killed | terminated)
    )

    bad = [w for w in waited if not isinstance(w.outcome, Job)]
    lags: dict[str, list[float]] = {g: [] for g in GROUPS}
    for w in waited:
        if w.job_id in completed:
            lags[w.group].append(w.at - completed[w.job_id][1])
    figures = "; ".join(
        f"{g} p50/max {statistics.median(v) * 1000:.0f}/{max(v) * 1000:.0f}ms"
        for g, v in lags.items()
        if v
    )
    report(
        f"r3-kill: jobs={jobs} completed={len(completed)} effects_once={out.acked} "
        f"lost={out.lost} dead={out.dead} sigkills={len([f for f in faults if f[0] == 'sigkill'])} "
        f"backend_kills={len([f for f in faults if f[0] == 'terminate'])} "
        f"listener_cuts={listener_cuts} reruns={len(reruns)} (unexplained {len(unexplained)}) "
        f"crashed={len(crashed)} drain={drained:.1f}s waiters_done={waited_for:.1f}s "
        f"deaf_listens={listen_conns} closed={holed_closed} notifications_held={notes_held}; "
        f"wait lag after finished_at: {figures}"
    )

    # The deaf LISTENs were never reset (still open, still held, not replaced),
    # and the done channel did notify them: the proxy holds what the server sent
    # (it reads one chunk past the hole, so at least one notification each).
    assert (listen_conns, holed_closed) == (2, 0)
    assert all(n >= 1 for n in notes_held), notes_held
    # Every waiter returned its job, completed, with the handler's result.
    assert len(waited) == jobs and not bad, [(w.group, w.job_id, repr(w.outcome)) for w in bad]
    for w in waited:
        assert isinstance(w.outcome, Job)
        assert (w.outcome.id, w.outcome.status) == (w.job_id, "completed"), w
        assert w.outcome.result == expected[w.job_id], w
    # Nothing lost: each job completed once, its one effect committed with its ack.
    assert sorted(completed) == sorted(ids)
    assert all(completed[j][0] == expected[j] for j in ids)
    assert out.ok() and out.dead == 0, out
    assert out.acked == jobs, out
    # The faults happened, and hit acks: cut runs were re-run after their lapse.
    assert len(faults) == SIGKILLS + TERMINATIONS, ("drained before the faults ended", faults)
    assert reruns, "no job ran twice: no fault cut an ack"
    assert not crashed, crashed
    # Within the poll of its completion, every waiter: the deaf ones by the poll
    # alone (their median lag is about half the poll, the others' tens of ms).
    for group, values in lags.items():
        assert len(values) == PER_GROUP, group
        assert max(values) <= POLL + SLACK, (group, sorted(values)[-5:])
