"""Flow control's cases (F2-F4; `--only flow-queue,flow-groups,flow-rate`).

FQ (flow-queue): D1's drain (claim_batch(10) + ack_batch by ``procs``
processes) of a queue with ``concurrency=50``, alternated with D1 without
limits ``fq_rounds`` times: what the limited claim (the settings row's
lock, the count of live claims) and the wake after each ack cost when the
limit does not bind (4 x 10 jobs in flight at most).

FG (flow-groups), two parts.  The claim beside blocked groups: a queue with
``group_concurrency=1`` holds ``fg_blocked`` pending jobs in ``fg_groups``
groups, each group at its limit (one job claimed and held), plus one group
with due jobs; claim 1 + ack, timed per claim, alternated with the same on
a queue with the same limits and only the due group (the "empty" queue:
nothing blocked), before and after a VACUUM of ``jobs``.  The blocked rows
are enqueued unparked (as ``enqueue_many`` leaves them): the first
``BURST_CLAIMS`` claims are timed as they are (each walks the unparked rows
ahead of the due group's and parks ``HOLD_LIMIT`` of them), then the rest
are parked in one statement -- what the claims' parking would leave after
``blocked / HOLD_LIMIT`` claims, which at 1M would take the better part of
an hour of such claims.  Then a drain of ``fg_drain`` jobs over
``fg_drain_groups`` groups at ``group_concurrency=1``, against D1 of the
same size in the same run.

FR (flow-rate): a Worker drains a backlog of a queue with ``rate=Rate(fr_rate,
per=1)`` for ``fr_seconds``: achieved rate / configured rate.

FW (flow-rate's companion, run with it): the slot-freed wake.  A Worker
waits on a queue with ``concurrency=1`` whose slot another connection
holds; that connection acks, and the time from the ack's call to the
Worker's handler starting is recorded (``perf_counter``, one process),
``fw_rounds`` times: p50 / p99.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from sqlalchemy.orm import Session

from alkstore_sa import EnqueueOpts, Job, Limits, QueueOpts, Rate, Store, Worker

from . import _cases, _drain
from ._db import Database, vacuum
from ._progress import Bar
from ._report import Figure, Figures, Target, _ratio

__all__ = [
    "claim_beside_blocked",
    "claim_beside_enqueued_burst",
    "drain_groups",
    "drain_limited",
    "rate",
    "targets",
    "wake",
]

PAYLOAD = b"x" * 16
FREE_GROUP = "free"
BURST_CLAIMS = 5  # claims timed right after the burst, before the rows are parked


def _store(db: Database) -> Store:
    return Store.from_url(db.sa_url())


def _insert(
    db: Database, queue: str, jobs: int, groups: int | None, vt: str = "30 seconds"
) -> None:
    """``jobs`` due pending rows of ``queue``, in ``groups`` groups (round robin), as
    ``enqueue_many`` leaves them (unparked), bulk-made in SQL."""
    grp = "'g' || (g %% %(groups)s)" if groups else "NULL"
    with db.connect() as conn:
        conn.execute(
            f"""
            INSERT INTO alkstore.jobs (queue, payload, grp, run_at, max_attempts,
                                       visibility_timeout)
            SELECT %(q)s, %(p)s, {grp}, statement_timestamp() - interval '1 minute', 5,
                   interval '{vt}'
              FROM generate_series(1, %(k)s) AS g
            """,
            {"q": queue, "p": PAYLOAD, "k": jobs, "groups": groups or 1},
        )


def _drain_of(db: Database, queue: str, jobs: int, procs: int, label: str) -> float:
    dsn = db.sa_url().render_as_string(hide_password=False)
    result = _drain.drain("alkstore", dsn, queue, 10, procs, jobs, label)
    if result.jobs != jobs:
        raise RuntimeError(f"{label}: drained {result.jobs} of {jobs}")
    return result.seconds


def drain_limited(db: Database, jobs: int, procs: int, rounds: int, label: str) -> list[Figure]:
    """FQ: D1 (n=10) of a queue with ``concurrency=50`` and D1 without limits,
    alternated ``rounds`` times (the order swapped each round: a loaded machine's
    drift falls on both)."""
    figs = []
    for r in range(rounds):
        for limited in (True, False) if r % 2 == 0 else (False, True):
            queue = f"fq-{r}-{'limited' if limited else 'plain'}"
            _cases.fill(db, queue, jobs)
            if limited:
                with _store(db) as store:
                    store.queue(queue).set_limits(Limits(concurrency=50))
            vacuum(db, "alkstore.jobs")
            what = "concurrency=50" if limited else "no limits (D1)"
            seconds = _drain_of(db, queue, jobs, procs, f"{label} round {r + 1} {what}")
            system = "alkstore" if limited else "alkstore-d1"
            figs.append(Figure("FQ", system, f"n=10, {procs} procs, {what}", jobs, seconds))
            _cases.reset(db)
    return figs


def drain_groups(db: Database, jobs: int, groups: int, procs: int, label: str) -> list[Figure]:
    """FG: D1 (n=10) of ``jobs`` over ``groups`` groups at ``group_concurrency=1``, then
    the same drain without limits or groups (its baseline, same size, same run)."""
    _insert(db, "fg-drain", jobs, groups)
    with _store(db) as store:
        store.queue("fg-drain").set_limits(Limits(group_concurrency=1))
    vacuum(db, "alkstore.jobs")
    limited = _drain_of(db, "fg-drain", jobs, procs, label)
    _insert(db, "fg-plain", jobs, None)
    vacuum(db, "alkstore.jobs")
    plain = _drain_of(db, "fg-plain", jobs, procs, f"{label} (D1 baseline)")
    shape = f"n=10, {procs} procs"
    return [
        Figure("FG", "alkstore", f"{shape}, {groups} groups, group_concurrency=1", jobs, limited),
        Figure("FG", "alkstore-d1", f"{shape}, no limits (D1 baseline)", jobs, plain),
    ]


def _sample(q: Any) -> float:
    t0 = time.perf_counter()
    got = q.claim_batch("bench", 1)
    took = time.perf_counter() - t0
    if len(got) != 1:
        raise RuntimeError(f"a claim of 1 got {len(got)} jobs")
    got[0].ack()
    return took


def _park_blocked(db: Database) -> int:
    """Park every unparked pending row of the full groups: what the claims' ``hold``
    leaves (``parked = true``), in one statement instead of ``HOLD_LIMIT`` per claim."""
    with db.connect() as conn:
        cur = conn.execute(
            "UPDATE alkstore.jobs SET parked = true WHERE queue = 'fg-heavy'"
            " AND status = 'pending' AND NOT parked AND grp <> %(f)s",
            {"f": FREE_GROUP},
        )
    return cur.rowcount


def _figure(shape: str, samples: list[float]) -> Figure:
    cuts = statistics.quantiles(samples, n=100) if len(samples) > 1 else samples * 99
    extra = {"p50_ms": statistics.median(samples) * 1000, "p99_ms": cuts[98] * 1000}
    return Figure("FG", "alkstore", shape, len(samples), sum(samples), extra)


def claim_beside_blocked(
    db: Database, blocked: int, groups: int, samples: int, label: str
) -> list[Figure]:
    """FG: claim 1 + ack beside ``blocked`` rows of ``groups`` full groups, alternated
    with the same on a queue with only the due group: right after the burst (the
    rows unparked, as ``enqueue_many`` leaves them; a few claims only), then with
    them parked, before and after a VACUUM."""
    limits = Limits(group_concurrency=1)
    _insert(db, "fg-heavy", blocked, groups, vt="1 hour")  # the holders never lapse
    with _store(db) as store:
        heavy, base = store.queue("fg-heavy"), store.queue("fg-base")
        heavy.set_limits(limits)
        base.set_limits(limits)
        held = heavy.claim_batch("holder", groups)  # one per group: every group full
        if len(held) != groups:
            raise RuntimeError(f"{label}: {len(held)} groups held, not {groups}")
        free = samples * 4 + 100
        for q in (heavy, base):
            for start in range(0, free, 5_000):
                q.enqueue_many([PAYLOAD] * min(5_000, free - start), EnqueueOpts(group=FREE_GROUP))
        vacuum(db, "alkstore.jobs")
        for _ in range(5):
            _sample(base)
        # The cliff before parking: each claim walks the unparked rows ahead of the
        # due group's and parks HOLD_LIMIT of them.
        burst = [_sample(heavy) for _ in range(BURST_CLAIMS)]
        figs = [_figure(f"claim 1, {blocked:,} blocked in {groups} full groups, unparked", burst)]
        figs[0].extra["parked_in_sql"] = float(_park_blocked(db))
        for when in ("after parking", "after VACUUM"):
            if when == "after VACUUM":
                vacuum(db, "alkstore.jobs")
            bar = Bar(f"{label} {when}", samples)
            heavy_s, base_s = [], []
            for i in range(samples):
                heavy_s.append(_sample(heavy))
                base_s.append(_sample(base))
                bar.set(i + 1)
            bar.close()
            shape = f"claim 1, {blocked:,} blocked in {groups} full groups, {when}"
            figs.append(_figure(shape, heavy_s))
            figs.append(_figure(f"claim 1, no blocked rows (baseline), {when}", base_s))
    return figs


def claim_beside_enqueued_burst(
    db: Database, blocked: int, groups: int, samples: int, label: str
) -> list[Figure]:
    """FG, F3's parking at enqueue: the groups are full first (one job each claimed
    and held), then ``blocked`` rows are enqueued into them through
    ``enqueue_many``, which parks them -- none enters the claim's range, so neither
    claims' parking nor a VACUUM is needed; claim 1 + ack right after, alternated
    with the same on a queue with only the due group."""
    limits = Limits(group_concurrency=1)
    with _store(db) as store:
        opts = QueueOpts(visibility_timeout=3600)  # the holders never lapse
        heavy, base = store.queue("fg-enq", opts), store.queue("fg-enq-base")
        heavy.set_limits(limits)
        base.set_limits(limits)
        for g in range(groups):
            heavy.enqueue(PAYLOAD, EnqueueOpts(group=f"g{g}"))
        if len(heavy.claim_batch("holder", groups)) != groups:
            raise RuntimeError(f"{label}: not every group is held")
        free = samples * 2 + 100
        for q in (heavy, base):
            q.enqueue_many([PAYLOAD] * free, EnqueueOpts(group=FREE_GROUP))
        vacuum(db, "alkstore.jobs")
        per_group = blocked // groups
        bar = Bar(f"{label} burst", per_group * groups)
        for g in range(groups):
            for start in range(0, per_group, 5_000):
                chunk = min(5_000, per_group - start)
                heavy.enqueue_many([PAYLOAD] * chunk, EnqueueOpts(group=f"g{g}"))
            bar.set((g + 1) * per_group)
        bar.close()
        with db.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM alkstore.jobs WHERE queue = 'fg-enq' AND parked"
                " AND grp <> %(f)s",
                {"f": FREE_GROUP},
            ).fetchone()
        parked = int(row[0]) if row else 0
        heavy_s, base_s = [], []
        for _ in range(samples):
            heavy_s.append(_sample(heavy))
            base_s.append(_sample(base))
    when = "enqueued into full groups"
    shape = f"claim 1, {per_group * groups:,} blocked in {groups} full groups, {when}"
    baseline = f"claim 1, no blocked rows (baseline), {when}"
    figs = [_figure(shape, heavy_s), _figure(baseline, base_s)]
    figs[0].extra["parked_at_enqueue"] = float(parked)
    return figs


def rate(db: Database, per_second: int, seconds: int, label: str) -> Figure:
    """FR: a Worker against a queue with ``rate=Rate(per_second, 1)`` for ``seconds``."""
    queue = "fr"
    _insert(db, queue, per_second * (seconds + 5) + 1_000, None)
    vacuum(db, "alkstore.jobs")
    with _store(db) as store:
        q = store.queue(queue)
        q.set_limits(Limits(rate=Rate(per_second, per=1.0)))
        total = q.stats().due

        def handler(job: Job) -> None:
            pass

        worker = Worker({q: handler}, concurrency=32, poll_interval=1.0, handle_signals=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        while q.stats().due == total:
            time.sleep(0.01)
        t0, due0 = time.perf_counter(), q.stats().due
        bar = Bar(label, seconds)
        while (now := time.perf_counter()) < t0 + seconds:
            time.sleep(min(1.0, t0 + seconds - now))
            bar.set(int(time.perf_counter() - t0))
        t1, due1 = time.perf_counter(), q.stats().due
        bar.close()
        worker.stop()
        thread.join(30)
    done = due0 - due1
    extra = {"configured_per_s": float(per_second), "achieved_per_s": done / (t1 - t0)}
    return Figure("FR", "alkstore", f"rate {per_second}/s, Worker c=32", done, t1 - t0, extra)


def wake(db: Database, rounds: int, label: str) -> Figure:
    """FW: from another connection's ack of the one slot to the waiting Worker's handler."""
    started: list[float] = []
    with _store(db) as store:
        q = store.queue("fw")
        q.set_limits(Limits(concurrency=1))
        worker = Worker(
            {q: lambda job: started.append(time.perf_counter())},
            poll_interval=30,
            handle_signals=False,
        )
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        samples: list[float] = []
        bar = Bar(label, rounds)
        try:
            while len(samples) < rounds:
                while q.stats().processing:  # the worker's last job not acked yet
                    time.sleep(0.002)
                # The holder's job enqueued and claimed in one transaction: the
                # worker's wake comes at its commit, with the slot already taken.
                s = Session(store.engine)
                s.begin()
                q.enqueue(b"h", session=s)
                got = q.claim_batch("holder", 1, session=s)
                (s.commit if got else s.rollback)()
                s.close()
                if not got:
                    continue
                before = len(started)
                q.enqueue(b"w")
                time.sleep(0.05)  # the worker was woken, claimed nothing: it waits
                if len(started) != before:
                    raise RuntimeError(f"{label}: the worker ran a job past the limit")
                t0 = time.perf_counter()
                got[0].ack()
                deadline = t0 + 5
                while len(started) == before and time.perf_counter() < deadline:
                    time.sleep(0.0005)
                if len(started) == before:
                    raise RuntimeError(f"{label}: no wake within 5 s of the ack")
                samples.append(started[before] - t0)
                bar.set(len(samples))
        finally:
            bar.close()
            worker.stop()
            thread.join(30)
    cuts = statistics.quantiles(samples, n=100)
    extra = {"p50_ms": statistics.median(samples) * 1000, "p99_ms": cuts[98] * 1000}
    return Figure("FW", "alkstore", "ack elsewhere -> waiting Worker's handler", rounds, 0.0, extra)


def _pooled(figs: Figures, case: str, system: str) -> Figure | None:
    """Every round's figure of ``case``/``system`` as one: jobs and seconds summed."""
    found = [f for f in figs.items if f.case == case and f.system == system]
    if not found:
        return None
    return Figure(
        case, system, found[0].shape, sum(f.jobs for f in found), sum(f.seconds for f in found)
    )


def targets(figs: Figures) -> list[Target]:
    out: list[Target] = []
    fq = _pooled(figs, "FQ", "alkstore")
    if fq is not None:
        d1 = _pooled(figs, "FQ", "alkstore-d1")
        out.append(Target("FQ concurrency=50 vs D1", ">= 0.7 x D1", _ratio(fq, d1), 0.7, True))
    for when in ("after parking", "after VACUUM", "enqueued into full groups"):
        heavy = next(
            (
                f
                for f in figs.items
                if f.case == "FG" and "blocked in" in f.shape and f.shape.endswith(when)
            ),
            None,
        )
        base = next(
            (f for f in figs.items if f.case == "FG" and "(baseline), " + when in f.shape), None
        )
        if heavy is not None and base is not None:
            value = heavy.extra["p50_ms"] / base.extra["p50_ms"]
            out.append(
                Target(
                    f"FG claim p50 beside blocked groups, {when}",
                    "<= 1.25 x no blocked rows",
                    value,
                    1.25,
                    False,
                )
            )
    fg = figs.find("FG", "alkstore", "n=10")
    if fg is not None:
        d1 = figs.find("FG", "alkstore-d1")
        out.append(
            Target("FG drain group_concurrency=1 vs D1", ">= 0.5 x D1", _ratio(fg, d1), 0.5, True)
        )
    fr = figs.find("FR", "alkstore")
    if fr is not None:
        value = fr.extra["achieved_per_s"] / fr.extra["configured_per_s"]
        out.append(Target("FR achieved / configured rate", "report (<= 1)", value, 1.0, False))
    fw = figs.find("FW", "alkstore")
    if fw is not None:
        out.append(
            Target("FW slot-freed wake p99", "<= 50 ms", fw.extra["p99_ms"], 50.0, False, unit="ms")
        )
    return out
