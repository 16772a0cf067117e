"""D2 like for like, where the CPU goes: ``python -m bench.cpu_split``.

The Worker (concurrency 50) and pgqueuer on asyncpg (5 consumers x batch
10: 50 jobs in flight too) drain 20,000 no-op jobs in turn on the same
server; around each drain the machine's busy CPU time is read from
``/proc/stat`` (Linux), so each drain's whole-machine CPU per job --
client, PostgreSQL and everything else -- stands beside its rate and the
client process's own CPU per job.  A drain that leaves the machine's
cores partly idle is bound by a wait, not by CPU.
"""

from __future__ import annotations

import argparse
import os

from . import _pgq, _worker
from ._db import migrate, open_database, vacuum

JOBS = 20_000


def _busy_seconds() -> float:
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    db = open_database()
    try:
        migrate(db)
        _pgq.install(db)
        for r in range(args.rounds):
            for name in ("Worker c=50", "pgqueuer-asyncpg 5x10"):
                vacuum(db, "alkstore.jobs")
                before = _busy_seconds()
                if name.startswith("Worker"):
                    fig = _worker.d2(db, JOBS, f"{r} {name}", 50)
                else:
                    fig = _pgq.drain(db, "asyncpg", JOBS, 5, 10, f"{r} {name}")
                busy = _busy_seconds() - before
                client = fig.extra.get("cpu_us_per_job")
                print(
                    f"{name:22} {fig.jobs / fig.seconds:7.0f} jobs/s  machine "
                    f"{busy / fig.jobs * 1e6:6.1f} us/job  cores busy "
                    f"{busy / fig.seconds:4.2f} of {cores}  client "
                    + (f"{client:5.1f} us/job" if client else "n/a"),
                    flush=True,
                )
    finally:
        db.drop()


if __name__ == "__main__":
    main()
