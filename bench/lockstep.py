"""``python -m bench.lockstep REV``: D1's claim + ack, REV against the working tree, in lockstep.

``bench.ab`` alternates whole bench runs, seconds apart; on a shared
machine whose load swings in seconds its ratios spread wide.  Here one
process per side (REV's checkout, from ``git archive``, and the tree's),
each on its own database of one server, drains its queue with
``claim_batch(n)`` + ``ack_batch`` in blocks of a few dozen steps, the
two sides taking turns block by block (alternating who goes first), so
whatever the machine is doing falls on both within milliseconds.  One
process, one connection per side: it compares the statements and the
client code of the two revisions, not their behaviour under contention
(D1 with 4 processes does that).

Printed per ``n`` and round: each side's jobs/s over the round, the ratio
tree / REV (above 1: the tree is faster) and each side's client CPU per
step; then the median, min and max ratio over the rounds.
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
from typing import IO, Any

import psycopg

from ._progress import say
from .ab import ROOT, export

SIDE_SCRIPT = Path(__file__).with_name("_lockstep_side.py")


class Side:
    """A ``_lockstep_side.py`` process running ``src``'s package on database ``url``."""

    def __init__(self, src: Path, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen(
            [sys.executable, str(SIDE_SCRIPT), url],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._line()
        if not Path(ready.split()[-1]).resolve().is_relative_to(src.resolve()):
            raise RuntimeError(f"{src}: the side imported {ready}, not this checkout's package")

    def _line(self) -> str:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise RuntimeError("a lockstep side exited (its error is above)")
        return line.strip()

    def ask(self, command: str) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._line().split()[1:]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _database(side: str) -> str:
    return f"alkstore_lockstep_{os.getpid()}_{side}"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.lockstep", description=__doc__.split("\n")[0])
    p.add_argument("rev", help="the git revision to compare the working tree with, e.g. c649b2a")
    p.add_argument("--against", help="a second git revision in place of the working tree")
    p.add_argument("--n", default="10,100", help="batch sizes (default 10,100)")
    p.add_argument("--rounds", type=int, default=5, help="rounds per batch size (default 5)")
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per round (default 20,000)")
    p.add_argument("--json", type=Path, help="write every round's figures here")
    return p.parse_args(argv)


def _round(sides: dict[str, Side], n: int, jobs: int) -> dict[str, dict[str, float]]:
    for side in sides.values():
        side.ask(f"fill {jobs}")
    block = max(1, 2_000 // n)  # steps per turn: a few tens of milliseconds
    took = {name: dict.fromkeys(("wall", "cpu", "server", "jobs", "steps"), 0.0) for name in sides}
    turn = 0
    while True:
        order = list(sides) if turn % 2 == 0 else list(reversed(sides))
        short = False
        for name in order:
            wall, cpu, done, server = sides[name].ask(f"steps {n} {block}")
            took[name]["wall"] += float(wall)
            took[name]["cpu"] += float(cpu)
            took[name]["server"] += float(server)
            took[name]["jobs"] += int(done)
            took[name]["steps"] += block
            short = short or int(done) < n * block
        turn += 1
        if short:  # a side ran dry: both did the same number of steps
            return took


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    from ._db import given_server, start_embedded

    given = os.environ.get("ALKSTORE_DATABASE_URL", "").strip()
    server = given_server(given) if given else start_embedded("alkstore-lockstep-pg-")
    rows: list[dict[str, Any]] = []
    sides: dict[str, Side] = {}
    made: list[str] = []
    admin = server.url(server.maintenance_db).render_as_string(hide_password=False)
    admin_dsn = admin.replace("postgresql+psycopg://", "postgresql://")
    try:
        with tempfile.TemporaryDirectory(prefix="alkstore-lockstep-") as tmp:
            srcs = {
                "rev": export(args.rev, Path(tmp) / "rev"),
                "tree": export(args.against, Path(tmp) / "against") if args.against else ROOT,
            }
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                for name in srcs:
                    conn.execute(f'CREATE DATABASE "{_database(name)}"')
                    made.append(_database(name))
            for name, src in srcs.items():
                db_url = server.url(_database(name))
                sides[name] = Side(src, db_url.render_as_string(hide_password=False))
            for n in (int(x) for x in args.n.split(",")):
                for r in range(args.rounds):
                    took = _round(sides, n, args.jobs)
                    rate = {s: t["jobs"] / t["wall"] for s, t in took.items()}
                    cpu = {s: 1000 * t["cpu"] / t["steps"] for s, t in took.items()}
                    backend = {s: 1000 * t["server"] / t["steps"] for s, t in took.items()}
                    row = {
                        "n": n,
                        "round": r,
                        "rate": rate,
                        "cpu_ms_per_step": cpu,
                        "server_cpu_ms_per_step": backend,
                    }
                    row["ratio"] = rate["tree"] / rate["rev"]
                    rows.append(row)
                    say(
                        f"n={n} round {r + 1}/{args.rounds}: rev {rate['rev']:,.0f}/s,"
                        f" tree {rate['tree']:,.0f}/s, tree/rev {row['ratio']:.3f};"
                        f" CPU per step, client + server: rev {cpu['rev']:.2f}"
                        f" + {backend['rev']:.2f} ms,"
                        f" tree {cpu['tree']:.2f} + {backend['tree']:.2f} ms"
                    )
    finally:
        for side in sides.values():
            side.close()
        if made:
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                for database in made:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        server.stop()
    other = args.against or "tree"
    for n in sorted({row["n"] for row in rows}):
        of_n = [row for row in rows if row["n"] == n]
        ratios = [row["ratio"] for row in of_n]
        cpu = [
            sum(row[k][s] for k in ("cpu_ms_per_step", "server_cpu_ms_per_step"))
            for row in of_n
            for s in ("rev", "tree")
        ]
        print(
            f"D1 lockstep n={n}: {other} / {args.rev} median {statistics.median(ratios):.3f}"
            f" (min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} rounds);"
            f" CPU per step (client + server) {args.rev} {statistics.median(cpu[0::2]):.2f} ms,"
            f" {other} {statistics.median(cpu[1::2]):.2f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps({"rev": args.rev, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
