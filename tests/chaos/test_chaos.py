"""Chaos: real worker processes, real faults, counted outcomes.

Guarantees under test (docs/reliability.md):
- at-least-once execution: every job ends acked or dead, none is lost;
- exactly-once claims: no (job, attempt) is ever handed to two runs, and no
  job runs more often than its ``max_attempts``;
- effectively-once for session-scoped handlers: a handler's writes commit
  with its ack, so each acked job has exactly one committed effect.
"""

from __future__ import annotations

import random
import time

import pytest
from sqlalchemy import text

from alkstore_sa import EnqueueOpts, QueueOpts
from alkstore_sa._calls.handle import HandleCore

from .._pg import Server
from .conftest import ENQUEUED, Chaos, report, restart_embedded

pytestmark = pytest.mark.chaos


@pytest.mark.timeout(180)
def test_chaos_sigkill_random_workers_loses_nothing_and_applies_effects_once(
    chaos: Chaos,
) -> None:
    jobs, workers, queue = 5000, 4, "sigkill"
    opts = QueueOpts(visibility_timeout=1.0, max_attempts=5)
    ids = chaos.enqueue(queue, jobs, opts)
    cfg = {"concurrency": 16, "poll_interval": 0.2, "work_ms": 1}
    # Half the workers are AsyncWorkers: both runtimes face the same kills.
    live = [chaos.spawn(queue, **cfg, **{"async": i % 2 == 1}) for i in range(workers)]
    rng = random.Random(7)
    kills = 0
    start = time.monotonic()
    while chaos.live(queue) > 0 and time.monotonic() - start < 40:
        time.sleep(rng.uniform(0.3, 0.7))
        victim = rng.randrange(workers)
        live[victim].kill()
        kills += 1
        live[victim] = chaos.spawn(queue, **cfg, **{"async": victim % 2 == 1})
    # Claims of the last victims lapse after the visibility timeout, then drain.
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=90)
    elapsed = time.monotonic() - start
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    report(
        f"sigkill: jobs={out.jobs} acked={out.acked} dead={out.dead} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} duplicate_claims={out.duplicate_claims} "
        f"max_runs_per_job={out.max_runs} kills={kills} runs={chaos.runs()} "
        f"elapsed={elapsed:.1f}s"
    )
    assert kills >= 10
    assert out.ok(), out


def test_chaos_postgres_restart_mid_drain_workers_reconnect_and_finish(
    chaos: Chaos, restartable: Server
) -> None:
    jobs, queue, down_for = 2000, "restart", 1.0
    ids = chaos.enqueue(queue, jobs, QueueOpts(visibility_timeout=2.0))
    procs = [
        chaos.spawn(queue, concurrency=8, poll_interval=0.2, **{"async": i == 1}) for i in range(2)
    ]
    chaos.wait_until(lambda: chaos.effects() >= jobs // 5, timeout=60)
    assert chaos.live(queue) > 0, "drained before the restart: nothing was tested"
    restart_embedded(restartable, down_for)
    up = time.monotonic()
    at_restart = chaos.effects()
    recovery = chaos.wait_until(lambda: chaos.effects() > at_restart, timeout=30, step=0.01)
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=60)
    drained = time.monotonic() - up
    # The same processes survived the outage: they reconnected, nobody restarted them.
    assert all(p.popen.poll() is None for p in procs)
    # The listener comes back on its own backoff, which a fast drain can
    # outrun: wait for it (still asserted below) before stopping the workers.
    chaos.wait_until(lambda: all("listener reconnected" in p.log_text() for p in procs), timeout=30)
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    report(
        f"pg-restart: jobs={out.jobs} acked={out.acked} dead={out.dead} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} duplicate_claims={out.duplicate_claims} "
        f"down={down_for:.1f}s first_ack_after_up={recovery:.2f}s drain_after_up={drained:.1f}s"
    )
    # The outage was seen and logged, and the listener came back, in each process.
    for proc in procs:
        log = proc.log_text()
        assert "listener connection lost" in log or "listener cannot connect" in log
        assert "listener reconnected" in log
    assert out.ok(), out


LISTEN_BACKENDS = """
FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'alkstore %'
  AND query LIKE 'LISTEN %'
"""
LATENCIES = """
SELECT extract(epoch FROM min(r.at) - e.at) FROM chaos_enqueued e
JOIN chaos_runs r ON r.job_id = e.job_id GROUP BY e.job_id, e.at ORDER BY 1
"""


def test_chaos_listen_backend_terminated_repeatedly_jobs_still_flow(chaos: Chaos) -> None:
    queue, poll = "listen", 1.0
    proc = chaos.spawn(queue, concurrency=4, poll_interval=poll)
    q = chaos.store().queue(queue)
    chaos.wait_until(lambda: chaos.scalar("SELECT count(*)" + LISTEN_BACKENDS) == 1, timeout=30)
    ids: list[int] = []
    terminated = 0
    # Bounded by terminations, not wall time: a slow machine enqueues fewer
    # jobs per second, but every round still kills the listener once it is back.
    start = time.monotonic()
    while terminated < 6 and time.monotonic() - start < 60:
        with chaos.engine.begin() as conn:
            ids.append(q.enqueue(b"x", session=conn))
            conn.execute(ENQUEUED, {"job_id": ids[-1]})
        if len(ids) % 15 == 0:
            terminated += chaos.scalar(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))" + LISTEN_BACKENDS
            )
        time.sleep(0.02)
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=2 * poll + 10)
    with chaos.engine.connect() as conn:
        waits = [float(w) for w in conn.execute(text(LATENCIES)).scalars()]
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    reconnects = proc.log_text().count("listener reconnected")
    p50, worst = waits[len(waits) // 2], waits[-1]
    report(
        f"listen-kill: jobs={out.jobs} acked={out.acked} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} terminations={terminated} "
        f"listener_reconnects={reconnects} wait_p50={p50 * 1000:.0f}ms wait_max={worst:.2f}s"
    )
    assert terminated >= 5 and reconnects >= 1
    assert len(waits) == len(ids)
    assert worst < poll + 2.0  # every job ran within a re-poll (plus scheduling slack)
    assert out.ok(), out


POOL_BACKENDS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'chaos-pool-%'
"""


def test_chaos_pool_smaller_than_concurrency_no_deadlock_no_leak(chaos: Chaos) -> None:
    jobs, queue, pool_size, concurrency = 1000, "pool", 2, 16
    ids = chaos.enqueue(queue, jobs, QueueOpts(visibility_timeout=5.0))
    cfg = {"concurrency": concurrency, "pool_size": pool_size, "max_overflow": 0}
    procs = [chaos.spawn(queue, **cfg, poll_interval=0.2, **{"async": i == 1}) for i in range(2)]
    most = 0

    def drained() -> bool:
        nonlocal most
        most = max(most, int(chaos.scalar(POOL_BACKENDS)))
        return chaos.live(queue) == 0

    took = chaos.wait_until(drained, timeout=60, step=0.02)
    reports = [p.stop() for p in procs]
    out = chaos.tally(queue, ids)
    after = int(chaos.scalar(POOL_BACKENDS))
    report(
        f"small-pool: jobs={out.jobs} acked={out.acked} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} pool={pool_size} concurrency={concurrency} "
        f"max_pool_backends={most} (2 workers) checked_out_at_exit="
        f"{[r['checkedout'] for r in reports]} drain={took:.1f}s"
    )
    assert most <= 2 * pool_size  # the pools never grew past their size
    assert [r["checkedout"] for r in reports] == [0, 0]  # nothing leaked
    assert after == 0  # and every server connection was closed at exit
    assert out.ok(), out


# Backends waiting for a lock the long transaction holds.
LOCK_WAITERS = "SELECT count(*) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"


def test_chaos_long_transaction_holding_a_claimed_row_is_skipped_not_double_claimed(
    chaos: Chaos,
) -> None:
    jobs, queue, vt = 300, "locked", 0.5
    opts = QueueOpts(visibility_timeout=vt)
    store = chaos.store()
    [held_id] = chaos.enqueue(queue, 1, opts, EnqueueOpts(priority=10))  # first in line
    ids = [held_id, *chaos.enqueue(queue, jobs - 1, opts)]
    core = store.queue(queue, opts)._core
    with chaos.engine.connect() as holder:
        holder.begin()
        holder_pid = holder.execute(text("SELECT pg_backend_pid()")).scalar()
        call = core.claim("long-transaction", 1)
        assert call is not None
        [claimed] = store._run(call, holder)  # claimed, locked, not committed
        assert claimed.id == held_id
        held_at = time.monotonic()
        for _ in range(2):
            chaos.spawn(queue, concurrency=8, poll_interval=0.1)
        blocked = 0

        def others_done() -> bool:
            nonlocal blocked
            blocked = max(blocked, int(chaos.scalar(LOCK_WAITERS, holder=holder_pid)))
            return chaos.live(queue) == 1

        others = chaos.wait_until(others_done, timeout=60, step=0.02)
        # Hold past several visibility timeouts: the claim lapses inside the transaction.
        time.sleep(max(0.0, 4 * vt - (time.monotonic() - held_at)))
        runs_while_held = chaos.scalar(
            "SELECT count(*) FROM chaos_runs WHERE job_id = :j", j=held_id
        )
        ack = store._run(HandleCore(core, claimed).ack(), holder)
        holder.commit()
    # Committed, the claim is processing and lapsed: a worker reclaims it, once.
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=30)
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    attempts = chaos.scalar(
        "SELECT array_agg(attempt) FROM chaos_runs WHERE job_id = :j", j=held_id
    )
    report(
        f"row-lock: jobs={out.jobs} acked={out.acked} lost={out.lost} "
        f"duplicate_claims={out.duplicate_claims} others_done_while_locked={others:.1f}s "
        f"waiting_on_its_lock={blocked} held_job_runs_while_locked={runs_while_held} "
        f"held_job_run_attempts={attempts}"
    )
    assert blocked == 0  # claims skipped the locked row: nobody ever waited on it
    assert runs_while_held == 0  # not double-claimed while the transaction held it
    assert ack is False  # the holder's claim had lapsed: its late ack is refused (Q14)
    assert attempts == [2]  # then exactly one run, on the reclaim
    assert out.ok(), out


WORKER_BACKENDS = """
FROM pg_stat_activity
WHERE datname = current_database()
  AND application_name IN ('alkstore chaos-' || :pid, 'chaos-pool-' || :pid)
"""


LATENCY_BY_JOB = """
SELECT e.job_id, extract(epoch FROM min(r.at) - e.at) FROM chaos_enqueued e
JOIN chaos_runs r ON r.job_id = e.job_id GROUP BY e.job_id, e.at
"""


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.timeout(180)
def test_b5_chaos_backend_kills_end_and_claim_latency_is_back_at_once(chaos: Chaos) -> None:
    """Every backend of a worker (its pool and its LISTEN) terminated twice a second
    for 6 s at a steady enqueue rate; in the 10 s after the kills stop, the wait
    from enqueue to run is within 2x of the 6 s before them (p50 and p95): no part
    sleeps out a backoff grown during the kills (a 30 s cap for claims).

    A second worker on a queue of its own, never cut, gets the same enqueues:
    what the machine's load adds to its waits after the kills (CI runs this
    beside three other test processes) is allowed on top of the 2x, so the
    bound still catches a backoff (waits of the 1 s poll or more) without
    failing on a busy machine's 100 ms stalls.
    """
    queue, control = "recover", "recover-control"
    proc = chaos.spawn(queue, concurrency=4, poll_interval=1.0)
    steady = chaos.spawn(control, concurrency=4, poll_interval=1.0)
    q = chaos.store().queue(queue, QueueOpts(visibility_timeout=5.0))
    c = chaos.store().queue(control, QueueOpts(visibility_timeout=5.0))
    chaos.wait_until(lambda: chaos.scalar("SELECT count(*)" + LISTEN_BACKENDS) == 2, timeout=30)
    phase_of: dict[int, str] = {}
    control_phase_of: dict[int, str] = {}
    terminated = 0
    start = time.monotonic()
    next_kill = start + 6.0
    for phase, until in (("before", 6.0), ("kills", 12.0), ("after", 22.0)):
        while time.monotonic() - start < until:
            with chaos.engine.begin() as conn:
                job_id = q.enqueue(b"x", session=conn)
                conn.execute(ENQUEUED, {"job_id": job_id})
                control_id = c.enqueue(b"x", session=conn)
                conn.execute(ENQUEUED, {"job_id": control_id})
            phase_of[job_id] = phase
            control_phase_of[control_id] = phase
            if phase == "kills" and time.monotonic() >= next_kill:
                terminated += chaos.scalar(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))" + WORKER_BACKENDS,
                    pid=str(proc.pid),
                )
                next_kill += 0.5
            time.sleep(0.05)  # ~20 jobs a second
    chaos.wait_until(lambda: chaos.live(queue) + chaos.live(control) == 0, timeout=60)
    with chaos.engine.connect() as conn:
        rows = conn.execute(text(LATENCY_BY_JOB)).all()
    chaos.stop_all()
    out = chaos.tally(queue, list(phase_of))
    waits: dict[str, list[float]] = {"before": [], "kills": [], "after": []}
    control_waits: dict[str, list[float]] = {"before": [], "kills": [], "after": []}
    for job_id, wait in rows:
        if job_id in phase_of:
            waits[phase_of[job_id]].append(float(wait))
        else:
            control_waits[control_phase_of[job_id]].append(float(wait))
    figures = {
        phase: (_quantile(w, 0.5), _quantile(w, 0.95), _quantile(w, 0.99), max(w))
        for phase, w in waits.items()
    }
    steady_figures = {
        phase: (_quantile(w, 0.5), _quantile(w, 0.95)) for phase, w in control_waits.items()
    }
    report(
        "backend kills, wait enqueue->run p50/p95/p99/max ms: "
        + "; ".join(
            f"{phase} " + "/".join(f"{x * 1000:.0f}" for x in fig) for phase, fig in figures.items()
        )
        + f"; terminations={terminated} lost={out.lost} duplicate_effects={out.duplicate_effects}"
        + f" claim_failures_logged={proc.log_text().count('claim on')}"
        + "; uncut worker before/after p50/p95 ms: "
        + "; ".join(
            f"{phase} " + "/".join(f"{x * 1000:.0f}" for x in steady_figures[phase])
            for phase in ("before", "after")
        )
    )
    assert terminated >= 10
    assert sum(len(w) for w in waits.values()) == len(phase_of)
    assert sum(len(w) for w in control_waits.values()) == len(control_phase_of)
    assert not steady.log_text().count("claim on")  # the control was never cut
    before, after = figures["before"], figures["after"]
    # 2x, with 20 ms for a shared machine's scheduling at a few-ms baseline,
    # plus whatever the load added to the uncut worker's waits meanwhile.
    for i in (0, 1):
        load = max(0.0, steady_figures["after"][i] - steady_figures["before"][i])
        assert after[i] <= 2 * before[i] + 0.02 + load, (figures, steady_figures)
    assert out.ok(), out
