"""Figures, the targets as ratios in one run, the table and the JSON."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    """One measured case: ``case`` (E1, D1, ...), who ran it, and its shape."""

    case: str
    system: str  # alkstore | raw-psycopg | pgqueuer-asyncpg | pgqueuer-psycopg
    shape: str  # e.g. "n=10, 4 procs"
    jobs: int
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)  # latencies etc.

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    @property
    def key(self) -> str:
        return f"{self.case}|{self.system}|{self.shape}"


@dataclass
class Target:
    name: str
    rule: str  # human text, e.g. ">= 0.7 x raw"
    value: float | None  # the measured ratio or latency; None when a side is missing
    threshold: float
    higher_is_better: bool
    unit: str = "x"

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        if self.higher_is_better:
            return self.value >= self.threshold
        return self.value <= self.threshold


class Figures:
    def __init__(self) -> None:
        self.items: list[Figure] = []

    def add(self, fig: Figure) -> Figure:
        self.items.append(fig)
        return fig

    def find(self, case: str, system: str, shape_prefix: str = "") -> Figure | None:
        for f in self.items:
            if f.case == case and f.system == system and f.shape.startswith(shape_prefix):
                return f
        return None

    def best(self, case: str, systems: list[str]) -> Figure | None:
        found = [f for s in systems if (f := self.find(case, s)) is not None]
        return max(found, key=lambda f: f.rate) if found else None


def _ratio(a: Figure | None, b: Figure | None) -> float | None:
    if a is None or b is None or b.rate == 0:
        return None
    return a.rate / b.rate


PGQ = ["pgqueuer-asyncpg", "pgqueuer-psycopg"]


def targets(figs: Figures) -> list[Target]:
    """The targets, each computed from figures of this run only."""
    out: list[Target] = []
    f = figs.find
    for n in ("n=10", "n=100"):
        out.append(
            Target(
                f"D1 {n} vs raw",
                ">= 0.7 x raw psycopg drain",
                _ratio(f("D1", "alkstore", n), f("D1", "raw-psycopg", n)),
                0.7,
                True,
            )
        )
    # Like for like: pgqueuer's drain holds 5 x 10 = 50 jobs at a
    # time, so the Worker runs with 50 slots; the concurrency-10 figure is
    # reported beside it (references()).
    out.append(
        Target(
            "D2 Worker c=50 vs pgqueuer-asyncpg",
            ">= 2 x pgqueuer-asyncpg (5 consumers x batch 10: both hold 50 jobs)",
            _ratio(f("D2", "alkstore-c50"), f("D2", "pgqueuer-asyncpg")),
            2.0,
            True,
        )
    )
    out.append(
        Target(
            "E2 vs pgqueuer batch enqueue",
            ">= 2 x pgqueuer's batch enqueue (its faster driver)",
            _ratio(f("E2", "alkstore"), figs.best("E2", PGQ)),
            2.0,
            True,
        )
    )
    out.append(
        Target(
            "E1 vs raw insert+notify",
            ">= 0.9 x raw one-round-trip insert+notify",
            _ratio(f("E1", "alkstore"), f("E1", "raw-psycopg")),
            0.9,
            True,
        )
    )
    l1 = f("L1", "alkstore")
    for pct, limit in (("p50", 3.0), ("p99", 15.0)):
        out.append(
            Target(
                f"L1 {pct}",
                f"<= {limit:g} ms",
                None if l1 is None else l1.extra.get(f"{pct}_ms"),
                limit,
                False,
                unit="ms",
            )
        )
    for n in ("n=10", "n=100"):
        out.append(
            Target(
                f"S1 {n} vs D1 {n}",
                ">= 0.8 x D1 (1M future + 100k dead rows present)",
                _ratio(f("S1", "alkstore", n), f("D1", "alkstore", n)),
                0.8,
                True,
            )
        )
    for case, what in (("S2", "not-yet-due"), ("S3", "expired, unswept")):
        if f(case, "alkstore") is not None:  # S2-S4 run only when asked for
            out.append(
                Target(
                    f"{case} vs D1 n=10",
                    f">= 0.8 x D1 n=10 ({what} rows outrank the jobs)",
                    _ratio(f(case, "alkstore"), f("D1", "alkstore", "n=10")),
                    0.8,
                    True,
                )
            )
    again = next((x for x in figs.items if x.case == "S3" and x.shape.endswith(", parked")), None)
    if again is not None:
        out.append(
            Target(
                "S3 again vs D1 n=10",
                ">= 0.8 x D1 n=10 (a second drain: the expired rows parked)",
                _ratio(again, f("D1", "alkstore", "n=10")),
                0.8,
                True,
            )
        )
    s4 = f("S4", "alkstore")
    if s4 is not None:
        start, end = s4.extra.get("p99_start_ms"), s4.extra.get("p99_end_ms")
        out.append(
            Target(
                "S4 claim p99 end / start",
                "<= 2 x: last tenth of the drain vs first (xid held)",
                None if not start or end is None else end / start,
                2.0,
                False,
            )
        )
    for system, who in (("alkstore", "Worker"), ("alkstore-async", "AsyncWorker")):
        d3 = [x for x in figs.items if x.case == "D3" and x.system == system]
        if d3:
            io = [x.rate for x in d3 if "sleep" in x.shape]
            noop = [x.rate for x in d3 if "no-op" in x.shape]
            out.append(
                Target(
                    f"D3 sleep-1ms vs no-op handlers ({who})",
                    f">= 0.8 x the same {who} (c=32) with no-op handlers",
                    statistics.median(io) / statistics.median(noop) if io and noop else None,
                    0.8,
                    True,
                )
            )
    l2 = f("L2", "alkstore")
    if l2 is not None:
        out.append(
            Target(
                "L2 jobs table dead tuples, median",
                "<= 5,000 (sampled every 10 s at 500 jobs/s)",
                l2.extra.get("dead_tup_median"),
                5000.0,
                False,
                unit="",
            )
        )
    h1 = f("H1", "alkstore")
    if h1 is not None:
        out.append(
            Target(
                "H1 heartbeat HOT share",
                ">= 0.9 of heartbeat updates HOT (long jobs, Worker c=50)",
                h1.extra.get("hot_share"),
                0.9,
                True,
            )
        )
    small = f("ST", "alkstore", "q.stats(), small queue")
    if small is not None:  # ST runs only when asked for (--only ST)
        out.append(
            Target(
                "ST small queue stats() p50",
                "<= 5 ms beside a queue of 1M live + 100k dead rows",
                small.extra.get("p50_ms"),
                5.0,
                False,
                unit="ms",
            )
        )
    return out


def b4_ratios(figs: Figures, shape: str, cpu: bool = False) -> list[float]:
    """B4: each round's instrumented figure over the plain one's, in round order: the
    drain rate (above 1: faster), or with ``cpu`` the client CPU per job (above 1: costlier)."""

    def values(system: str) -> list[float]:
        return [
            f.extra.get("cpu_us_per_job", 0.0) if cpu else f.rate
            for f in figs.items
            if (f.case, f.system, f.shape) == ("B4", system, shape)
        ]

    plain, instrumented = values("alkstore"), values("alkstore+prometheus")
    return [i / p for p, i in zip(plain, instrumented, strict=False) if p > 0]


def references(figs: Figures) -> dict[str, float | None]:
    """Ratios worth reading beside the targets, but not targets."""
    refs: dict[str, float | None] = {
        "D2 Worker c=10 vs pgqueuer-asyncpg (it holds 50 jobs)": _ratio(
            figs.find("D2", "alkstore"), figs.find("D2", "pgqueuer-asyncpg")
        ),
    }
    # U1: what a unique key costs an enqueue, against the same run's E1/E2 and raw.
    f = figs.find
    for name, a, b in (
        ("E1U new key vs E1", f("E1U", "alkstore", "1 job"), f("E1", "alkstore")),
        ("E1U new key vs raw insert+notify", f("E1U", "alkstore", "1 job"), f("E1", "raw-psycopg")),
        ("E1U key live (id back) vs E1", f("E1U", "alkstore", "key live"), f("E1", "alkstore")),
        ("E2U vs E2", f("E2U", "alkstore"), f("E2", "alkstore")),
        ("E2U vs raw multi-row insert", f("E2U", "alkstore"), f("E2", "raw-psycopg")),
    ):
        if a is not None:
            refs[name] = _ratio(a, b)
    # D1: the async face on asyncpg over the same on psycopg, same run.
    pairs = [
        ("E1 AsyncStore asyncpg/psycopg (rate)", "E1", ""),
        ("D1 n=10 AsyncStore asyncpg/psycopg (rate)", "D1", "n=10"),
        ("D1 n=100 AsyncStore asyncpg/psycopg (rate)", "D1", "n=100"),
        ("D2 AsyncWorker asyncpg/psycopg (rate)", "D2", ""),
    ]
    for name, case, shape in pairs:
        apg = figs.find(case, "alkstore-asyncpg", shape)
        if apg is not None:
            refs[name] = _ratio(apg, figs.find(case, "alkstore-async", shape))
    l1_apg, l1_pg = figs.find("L1", "alkstore-asyncpg"), figs.find("L1", "alkstore-async")
    if l1_apg is not None and l1_pg is not None and l1_pg.extra.get("p50_ms"):
        refs["L1 AsyncWorker p50 asyncpg/psycopg (latency)"] = (
            l1_apg.extra["p50_ms"] / l1_pg.extra["p50_ms"]
        )
    for shape in ("Worker c=10", "AsyncWorker c=10"):
        for cpu, what in ((False, "rate"), (True, "CPU/job")):
            ratios = b4_ratios(figs, shape, cpu)
            if ratios:
                each = " ".join(f"{r:.2f}" for r in ratios)
                name = f"B4 {shape} {what} +prom/plain, median of {len(ratios)} ({each})"
                refs[name] = statistics.median(ratios)
    return refs


def table(figs: Figures, tgts: list[Target]) -> str:
    lines = [
        f"{'case':<5} {'system':<18} {'shape':<34} {'jobs':>9} {'seconds':>8} "
        f"{'jobs/s':>10}  notes",
        "-" * 100,
    ]
    for x in figs.items:
        notes = ", ".join(f"{k}={v:.2f}" for k, v in x.extra.items())
        lines.append(
            f"{x.case:<5} {x.system:<18} {x.shape:<34} {x.jobs:>9,} {x.seconds:>8.2f} "
            f"{x.rate:>10,.0f}  {notes}"
        )
    lines += ["", f"{'target':<32} {'rule':<52} {'value':>9}  verdict", "-" * 100]
    for t in tgts:
        suffix = {"x": "x", "ms": " ms"}.get(t.unit, "")
        value = "n/a" if t.value is None else f"{t.value:.2f}{suffix}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t.met]
        lines.append(f"{t.name:<32} {t.rule:<52} {value:>9}  {verdict}")
    refs = {k: v for k, v in references(figs).items() if v is not None}
    if refs:
        lines += ["", "for reference (not targets)", "-" * 100]
        lines += [f"{name:<86} {value:>7.2f}x" for name, value in refs.items()]
    return "\n".join(lines)


def write_json(
    path: Path, meta: dict[str, Any], sizes: dict[str, int], figs: Figures, tgts: list[Target]
) -> None:
    doc = {
        "meta": meta,
        "sizes": sizes,
        "figures": [{**asdict(f), "rate": f.rate} for f in figs.items],
        "targets": [{**asdict(t), "met": t.met} for t in tgts],
        "references": references(figs),
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
