"""``python -m bench.ab REV``: the working tree against git revision ``REV``, alternating.

REV's files (``git archive``) go into a throwaway directory; each round
runs REV's own ``python -m bench --only CASE --json`` for each case and then
the working tree's (the next round the other way round, so drift on a shared machine
hits both alike), each in a subprocess of this interpreter with its side's
checkout first on ``PYTHONPATH`` -- the dependencies are this venv's, which
do not change between revisions.  Both sides use ONE server (embedded,
started here, or ``ALKSTORE_DATABASE_URL``); each bench run makes, migrates
(with its own side's revisions) and drops its own database on it.

Each case is its own bench run, after a ``CHECKPOINT``: a case then starts
from the same server state on both sides whatever ran before it.  Run
together, a case followed different work on each side (the tree's E1 also
runs the ``AsyncStore`` variants: twice the single-row commits of the first
release's bench), and E2 after it read 0.51x of the first release in three
rounds, against 1.02x run alone and 1.08x run this way (docs/benchmarks.md,
stop 35).  The checkpoint keeps one due from the earlier runs' WAL out of
the next run.

Each side measures with its own bench code, so a case means what it meant
at that revision (D1 is 4 processes of claim_batch(n) + ack_batch of
20,000 jobs at every revision).  Printed: per case, each side's median
over the rounds, and the ratio tree / REV as min / median / max of the
per-round ratios; beside it each side's D1 / raw psycopg ratio, both
figures from the same bench run.  L1's figure is the p50 wake latency
(lower is better: a ratio above 1 is slower).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from ._progress import say

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = ("D1", "D2", "L1", "E1", "E2")
# (case, system, shape prefix, what is compared): the rows the A/B prints.
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("E1", "alkstore", "", "rate"),
    ("E2", "alkstore", "", "rate"),
    ("D1", "alkstore", "n=10,", "rate"),
    ("D1", "alkstore", "n=100,", "rate"),
    ("D2", "alkstore", "", "rate"),
    ("D2", "alkstore-c50", "", "rate"),
    ("L1", "alkstore", "", "p50_ms"),
)
Figures = list[dict[str, Any]]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    p.add_argument("rev", help="the git revision to compare the working tree with, e.g. c649b2a")
    p.add_argument(
        "--against",
        help="a second git revision to run in place of the working tree (both sides then "
        "fixed: edits made while it runs do not leak into the figures)",
    )
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated bench cases")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each one run per side")
    p.add_argument("--json", type=Path, help="write every run's figures and the ratios here")
    p.epilog = "Arguments after -- go to both sides' bench (sizes: -- --jobs 5000 --e1 1000)."
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.bench_args = argv[cut + 1 :]
    return args


def export(rev: str, into: Path) -> Path:
    """REV's tracked files in ``into`` (``git archive``: no worktree, no git state)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True, check=True)
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_side(src: Path, url: str, cases: str, extra: Sequence[str], out: Path) -> Figures:
    """One ``python -m bench`` of the checkout at ``src`` against the server at ``url``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ALKSTORE_DATABASE_URL"] = url
    check = [sys.executable, "-c", "import alkstore_sa, bench; print(alkstore_sa.__file__)"]
    found = subprocess.run(check, cwd=src, env=env, capture_output=True, text=True, check=True)
    if not Path(found.stdout.strip()).resolve().is_relative_to(src.resolve()):
        raise RuntimeError(f"{src}: imported {found.stdout.strip()}, not this checkout's package")
    cmd = [sys.executable, "-m", "bench", "--only", cases, "--no-pgqueuer", "--json", str(out)]
    subprocess.run([*cmd, *extra], cwd=src, env=env, check=True, stdout=subprocess.DEVNULL)
    figs: Figures = json.loads(out.read_text())["figures"]
    return figs


def checkpoint(dsn: str) -> bool:
    """Write out what the previous run left (WAL, dirty pages) before the next one starts.

    False when the role may not (a given server needs a superuser or
    ``pg_checkpoint``): the runs go on without, and the caller stops asking.
    """
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege as exc:
        say(f"no CHECKPOINT between runs ({exc}); cases may feel what ran before them")
        return False
    return True


def pick(figs: Figures, case: str, system: str, prefix: str, what: str) -> float | None:
    for f in figs:
        if f["case"] == case and f["system"] == system and f["shape"].startswith(prefix):
            value = f["rate"] if what == "rate" else f["extra"].get(what)
            return float(value) if value is not None else None
    return None


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def summarise(
    rev: str, runs: dict[str, list[Figures]], other: str = "tree"
) -> tuple[str, list[dict[str, Any]]]:
    """The table: per row each side's median and the per-round ratios tree / REV."""
    lines = [
        f"{'case':<28} {rev + ' (median)':>16} {other + ' (median)':>14}  "
        f"{other}/{rev} min / median / max",
    ]
    rows: list[dict[str, Any]] = []

    def row(name: str, old: list[float | None], new: list[float | None]) -> None:
        pairs = [(a, b) for a, b in zip(old, new, strict=True) if a and b]
        if not pairs:
            return
        ratios = [b / a for a, b in pairs]
        mo = statistics.median(a for a, _ in pairs)
        mn = statistics.median(b for _, b in pairs)
        lines.append(f"{name:<28} {mo:>16,.2f} {mn:>14,.2f}  {_spread(ratios)}")
        rows.append({"row": name, "rev": mo, "tree": mn, "ratios": ratios})

    for case, system, prefix, what in ROWS:
        name = f"{case} {system} {prefix.rstrip(',')} {'p50 ms' if what != 'rate' else 'jobs/s'}"
        old = [pick(f, case, system, prefix, what) for f in runs["rev"]]
        new = [pick(f, case, system, prefix, what) for f in runs["tree"]]
        row(" ".join(name.split()), old, new)
    for n in ("n=10,", "n=100,"):
        for side in ("rev", "tree"):
            vals = []
            for figs in runs[side]:
                alk = pick(figs, "D1", "alkstore", n, "rate")
                raw = pick(figs, "D1", "raw-psycopg", n, "rate")
                if alk and raw:
                    vals.append(alk / raw)
            if vals:
                who = rev if side == "rev" else other
                name = f"D1 {n.rstrip(',')} {who} / raw psycopg"
                lines.append(f"{name:<28} {'':>16} {'':>14}  {_spread(vals)}")
                rows.append({"row": name, "ratios": vals})
    return "\n".join(lines), rows


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    extra: list[str] = args.bench_args
    given = os.environ.get("ALKSTORE_DATABASE_URL", "").strip()
    from ._db import given_server, start_embedded

    server = given_server(given) if given else start_embedded("alkstore-ab-pg-")
    url = server.url(server.maintenance_db).render_as_string(hide_password=False)
    dsn = server.dsn(server.maintenance_db)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    checkpoints = True
    runs: dict[str, list[Figures]] = {"rev": [], "tree": []}
    try:
        with tempfile.TemporaryDirectory(prefix="alkstore-ab-") as tmp:
            old = export(args.rev, Path(tmp) / "rev")
            new = export(args.against, Path(tmp) / "against") if args.against else ROOT
            say(f"{args.rev} exported to {old}; the other side: {new}")
            for r in range(args.rounds):
                order = ("rev", "tree") if r % 2 == 0 else ("tree", "rev")
                for side in order:
                    say(f"round {r + 1}/{args.rounds}: {side}")
                    src = old if side == "rev" else new
                    figs: Figures = []
                    for case in cases:
                        checkpoints = checkpoints and checkpoint(dsn)
                        out = Path(tmp) / f"{side}-{r}-{case}.json"
                        figs += run_side(src, url, case, extra, out)
                    runs[side].append(figs)
    finally:
        server.stop()
    text, rows = summarise(args.rev, runs, args.against or "tree")
    print(text)
    if args.json:
        doc = {"rev": args.rev, "cases": args.cases, "rounds": args.rounds, "rows": rows}
        args.json.write_text(json.dumps({**doc, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
