"""Chaos on the network path: workers and producers reach PostgreSQL through a
fault-injecting proxy (``_proxy.py``) that cuts connections at random bytes
and right after COMMITs, and blackholes them (no reset).

Every handler start is logged straight to the server (``chaos_runs``), and
so is every handler end (``chaos_done``, with the client port of the
session's connection), so a job that ran to the end twice can be traced to
the cut that broke its first ack transaction.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from sqlalchemy import URL, create_engine, text

from alkstore_sa import QueueOpts, Store

from ._proxy import Cut, Proxy
from .conftest import ENQUEUED, Chaos, report

pytestmark = pytest.mark.chaos
PROXY_SEED = 18  # the proxy fixture's (conftest.py)

CLAIM_SQL = "exhausted_moved"  # a CTE name only the claim statement has
ACK_SQL = "DELETE FROM alkstore.jobs"  # the ack (a session handler's, in its transaction)


def _text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@dataclass
class Producers:
    """Threads enqueuing through the proxy in small transactions, counting acks."""

    acked: list[int]
    failed_commits: int = 0  # enqueue transactions that raised (outcome unknown or not)
    stop: threading.Event = field(default_factory=threading.Event)


def _produce(url: URL, queue: str, opts: QueueOpts, want: int, out: Producers) -> None:
    """Enqueue 20 jobs per transaction until ``want`` jobs (all threads) were acked."""
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
    q = Store(engine).queue(queue, opts)
    try:
        b = 0
        while len(out.acked) < want and not out.stop.is_set():
            b += 1
            try:
                with engine.begin() as conn:
                    ids = q.enqueue_many([b"%d" % b] * 20, session=conn)
                    conn.execute(ENQUEUED, [{"job_id": i} for i in ids])
            except Exception:  # a cut: this enqueue's fate is unknown to us
                out.failed_commits += 1
                continue
            out.acked.extend(ids)  # the commit returned: these must run
            # Paced: the enqueues span ~10 s of cuts whatever the machine's speed.
            time.sleep(0.1)
    finally:
        engine.dispose()


# Reruns of a job that ran to its end: the earlier run's port and end time,
# the job and how many such runs it had.
FULL_RERUNS = """
SELECT d.job_id, d.port, d.at FROM chaos_done d
WHERE d.job_id IN (SELECT job_id FROM chaos_done GROUP BY job_id HAVING count(*) > 1)
  AND d.attempt < (SELECT max(attempt) FROM chaos_done x WHERE x.job_id = d.job_id)
"""


def _cause(cuts: list[Cut], port: int, at: float) -> Cut | None:
    """The cut of connection ``port`` that broke a run's ack (after it ended)."""
    # The ack follows the handler's end at once: its cut comes within seconds.
    after = [c for c in cuts if c.client_port == port and at - 0.05 <= c.at <= at + 10]
    return min(after, key=lambda c: c.at) if after else None


@pytest.mark.timeout(150)
def test_chaos_proxy_cuts_mid_drain_lose_no_acked_enqueue_and_rerun_only_on_cut_acks(
    chaos: Chaos, proxy: Proxy
) -> None:
    queue, preloaded, produced = "cuts", 1000, 4000  # 5,000 jobs, 4,000 of them acked via proxy
    opts = QueueOpts(visibility_timeout=10.0, max_attempts=20)
    chaos.max_attempts = 20
    via = proxy.url(chaos.url)
    pre = chaos.enqueue(queue, preloaded, opts)
    cfg = {
        "url": _text(via),
        "record_url": chaos.url_text,
        "concurrency": 8,
        "poll_interval": 0.2,
        "work_ms": 2,
        "done": True,
    }
    procs = [chaos.spawn(queue, **cfg, **{"async": i == 1}) for i in range(2)]
    # Both running (registered, V1) before the first cut: a worker still
    # starting whose schema check is cut exits at start, by design.
    chaos.wait_until(
        lambda: chaos.scalar("SELECT count(*) FROM alkstore.workers") >= len(procs), timeout=60
    )
    out = Producers(acked=[])
    producers = [
        threading.Thread(target=_produce, args=(via, queue, opts, produced, out), daemon=True)
        for _ in range(2)
    ]
    for t in producers:
        t.start()
    rng = random.Random(18)
    start = time.monotonic()
    random_cuts = commit_cuts_armed = 0
    # Cut every 0.1-0.4 s while the producers run and jobs remain (at most 40 s).
    while time.monotonic() - start < 40 and (
        any(t.is_alive() for t in producers) or chaos.live(queue) > 0
    ):
        time.sleep(rng.uniform(0.05, 0.3))
        if rng.random() < 0.4:
            proxy.cut_next_commit()
            commit_cuts_armed += 1
        else:
            proxy.cut()
            random_cuts += 1
    cutting = time.monotonic() - start
    out.stop.set()
    for t in producers:
        t.join(30)
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=60)
    elapsed = time.monotonic() - start
    for p in procs:
        assert p.popen.poll() is None, p.log_text()[-3000:]
    chaos.stop_all()
    cuts = list(proxy.cuts)

    committed = [int(i) for i in chaos.scalar("SELECT array_agg(job_id) FROM chaos_enqueued")]
    ids = pre + committed
    tally = chaos.tally(queue, ids)
    with chaos.engine.connect() as conn:
        acked_lost = conn.execute(
            text(
                "SELECT count(*) FROM unnest(CAST(:ids AS bigint[])) a(id) "
                "WHERE NOT EXISTS (SELECT 1 FROM chaos_effects e WHERE e.job_id = a.id) "
                "AND NOT EXISTS (SELECT 1 FROM alkstore.dead_jobs d WHERE d.id = a.id)"
            ),
            {"ids": out.acked + pre},
        ).scalar()
        reruns = conn.execute(text(FULL_RERUNS)).all()
        runs_twice = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT job_id FROM chaos_runs "
                "GROUP BY job_id HAVING count(*) > 1) x"
            )
        ).scalar()
    commit_cuts = [c for c in cuts if c.during_commit]
    # COMMITs of ack transactions: on a connection that had sent the ack.
    ack_commit_cuts = [c for c in commit_cuts if c.saw(ACK_SQL)]
    causes = [_cause(cuts, port, at) for _, port, at in reruns]
    unexplained = [r for r, c in zip(reruns, causes, strict=True) if c is None]
    by_commit = sum(1 for c in causes if c is not None and c.during_commit)
    by_ack = sum(1 for c in causes if c is not None and c.in_flight and ACK_SQL in c.in_flight)
    acked_in_unknown = len(committed) - len(out.acked)
    report(
        f"proxy-cuts: jobs={tally.jobs} (preloaded={preloaded}, enqueued via proxy="
        f"{len(committed)}: acked={len(out.acked)} + committed-but-unacked={acked_in_unknown}; "
        f"failed enqueue commits={out.failed_commits}) acked={tally.acked} dead={tally.dead} "
        f"lost={tally.lost} acked_enqueues_lost={acked_lost} "
        f"duplicate_effects={tally.duplicate_effects} duplicate_claims={tally.duplicate_claims} "
        f"cuts={len(cuts)} (random={random_cuts} armed, commit={commit_cuts_armed} armed; "
        f"during COMMIT={len(commit_cuts)}, of an ack={len(ack_commit_cuts)}) "
        f"connections={proxy.connections_made} jobs_run_more_than_once={runs_twice} "
        f"ran_to_the_end_twice={len(reruns)} (ack COMMIT cut={by_commit}, ack statement cut="
        f"{by_ack}, cut between statements={len(reruns) - by_commit - by_ack - len(unexplained)}, "
        f"unexplained={len(unexplained)}) cutting={cutting:.1f}s elapsed={elapsed:.1f}s"
    )
    assert len(cuts) >= 20 and len(commit_cuts) >= 5
    assert acked_lost == 0
    assert tally.ok(), tally
    # A job runs to its end twice only when the ack transaction of the
    # earlier run was cut: each such rerun has a cut on its connection.
    assert unexplained == [], unexplained
    # The duplicates the client could not have avoided -- its COMMIT cut,
    # outcome unknown -- are bounded by the ack COMMITs that were cut.
    assert by_commit <= len(ack_commit_cuts)


def _worker_url(proxy: Proxy, chaos: Chaos, face: str) -> str:
    via = proxy.url(chaos.url)
    return _text(via.set(drivername="postgresql+asyncpg") if face == "asyncpg" else via)


# Per job: seconds from the enqueue's commit to its first run, in enqueue order.
WAITS = """
SELECT extract(epoch FROM min(r.at) - e.at) FROM chaos_enqueued e
JOIN chaos_runs r ON r.job_id = e.job_id GROUP BY e.job_id, e.at ORDER BY e.job_id
"""


def _log_time(proc_log: str, needle: str) -> float | None:
    """The wall time of the first log line containing ``needle`` (the harness's format)."""
    for line in proc_log.splitlines():
        if needle in line:
            stamp = " ".join(line.split(" ", 2)[:2])
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


@pytest.mark.parametrize("face", ["sync", "asyncpg"])
def test_chaos_proxy_blackholed_listen_connection_is_noticed_and_jobs_keep_flowing(
    chaos: Chaos, proxy: Proxy, face: str
) -> None:
    if face == "asyncpg":
        pytest.importorskip("asyncpg")
    queue, poll, interval, probe = f"bh-listen-{face}", 1.0, 2.0, 1.0
    proc = chaos.spawn(
        queue,
        url=_worker_url(proxy, chaos, face),
        **{"async": face != "sync"},
        record_url=chaos.url_text,
        concurrency=4,
        poll_interval=poll,
        liveness_interval=interval,
        liveness_timeout=probe,
    )
    chaos.wait_until(lambda: any(c.saw("LISTEN") for c in proxy.snapshot()), timeout=30)
    q = chaos.store().queue(queue)
    ids: list[int] = []

    def enqueue() -> None:
        with chaos.engine.begin() as conn:
            ids.append(q.enqueue(b"x", session=conn))
            conn.execute(ENQUEUED, {"job_id": ids[-1]})

    for _ in range(5):  # LISTEN works: these are woken at once
        enqueue()
        time.sleep(0.1)
    [holed] = proxy.blackhole(lambda c: c.saw("LISTEN"))
    start = time.monotonic()
    before = len(ids)
    relisten: float | None = None
    after = 0
    # A job every 100 ms through the blackhole, and 2 s more once LISTEN is back.
    while time.monotonic() - start < 30:
        enqueue()
        time.sleep(0.1)
        if relisten is None and any(c.saw("LISTEN") and c is not holed for c in proxy.snapshot()):
            relisten, after = time.monotonic() - start, len(ids)
        if relisten is not None and time.monotonic() - start > relisten + 2:
            break
    chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=2 * poll + 10)
    with chaos.engine.connect() as conn:
        waits = [float(w) for w in conn.execute(text(WAITS)).scalars()]
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    assert relisten is not None, "the listener never noticed its silent connection"
    assert holed.holed_at is not None
    noticed = _log_time(proc.log_text(), "listener connection lost")
    detect = None if noticed is None else noticed - holed.holed_at
    during, later = sorted(waits[before:after]), sorted(waits[after:])
    report(
        f"blackholed-listen-{face}: jobs={out.jobs} acked={out.acked} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} liveness_interval={interval:g}s "
        f"probe_timeout={probe:g}s poll_interval={poll:g}s detected_after="
        f"{detect if detect is None else round(detect, 2)}s re_listen_after={relisten:.2f}s "
        f"jobs_while_silent={len(during)} wait_p50_while_silent={during[len(during) // 2]:.2f}s "
        f"wait_max_while_silent={during[-1]:.2f}s wait_p50_after={later[len(later) // 2]:.3f}s"
    )
    assert len(waits) == len(ids)
    assert during[-1] < poll + 2.0  # the re-poll carried the jobs while LISTEN was silent
    assert relisten < interval + probe + 5.0
    # Notifications work again: jobs no longer wait for the re-poll.
    assert later[len(later) // 2] < poll / 2
    assert out.ok(), out


@pytest.mark.parametrize("face", ["sync", "async", "asyncpg"])
def test_chaos_proxy_blackholed_claim_is_abandoned_and_the_worker_recovers(
    chaos: Chaos, proxy: Proxy, face: str
) -> None:
    if face == "asyncpg":
        pytest.importorskip("asyncpg")
    queue, jobs, vt, claim_timeout = f"bh-claim-{face}", 300, 3.0, 2.0
    ids = chaos.enqueue(queue, jobs, QueueOpts(visibility_timeout=vt))
    proc = chaos.spawn(
        queue,
        url=_worker_url(proxy, chaos, face),
        record_url=chaos.url_text,
        concurrency=4,
        poll_interval=0.2,
        work_ms=20,
        claim_timeout=claim_timeout,
        **{"async": face != "sync"},
    )
    chaos.wait_until(lambda: chaos.runs() >= 20, timeout=30)
    # The next claim reaches the server and runs there; its reply never comes back.
    proxy.blackhole_next(lambda sql: CLAIM_SQL in sql)
    chaos.wait_until(lambda: bool(proxy.blackholed), timeout=30)
    [holed] = proxy.blackholed
    assert holed.holed_at is not None
    try:
        took = chaos.wait_until(lambda: chaos.live(queue) == 0, timeout=45)
    except AssertionError:
        raise AssertionError(f"not drained; worker log:\n{proc.log_text()[-4000:]}") from None
    chaos.stop_all()
    out = chaos.tally(queue, ids)
    log = proc.log_text()
    failed = _log_time(log, "no reply within")
    recovered = _log_time(log, "work again")
    assert failed is not None and recovered is not None, log[-3000:]
    reclaimed = chaos.scalar("SELECT count(*) FROM chaos_runs WHERE attempt > 1")
    runs = chaos.runs()
    report(
        f"blackholed-claim-{face}: jobs={out.jobs} acked={out.acked} lost={out.lost} "
        f"duplicate_effects={out.duplicate_effects} duplicate_claims={out.duplicate_claims} "
        f"runs={runs} claim_timeout={claim_timeout:g}s vt={vt:g}s "
        f"claim_abandoned_after={failed - holed.holed_at:.2f}s "
        f"claims_work_again_after={recovered - holed.holed_at:.2f}s "
        f"held_reply_rows={holed.rows_held} reclaimed_runs={reclaimed} "
        f"drain_after_hole={took:.1f}s"
    )
    assert failed - holed.holed_at < claim_timeout + 8.0
    assert runs == jobs  # the held claim's jobs never ran on it: each job ran once
    # The jobs in the reply that never came ran later, as their next attempt.
    assert reclaimed == holed.rows_held
    assert out.ok(), out
