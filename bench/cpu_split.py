"""D2 like for like, where the CPU goes: ``python -m bench.cpu_split``.

The Worker (concurrency 50) and pgqueuer on asyncpg (5 consumers x batch
10: 50 jobs in flight too) drain 20,000 no-op jobs in turn on the same
server; around each drain the machine's busy CPU time is read from
``/proc/stat`` (Linux), so each drain's whole-machine CPU per job --
client, PostgreSQL and everything else -- stands beside its rate and the
client process's own CPU per job.  A drain that leaves the machine's
cores partly idle is bound by a wait, not by CPU.

``--processes`` adds XP's drains (``run_processes`` children, 50 in flight
in all) by one and by two processes: whether a second process has an idle
core to use (X1).
"""

from __future__ import annotations

import argparse
import os

from . import _pgq, _processes, _worker
from ._db import migrate, open_database, vacuum
from ._processes import machine_busy_seconds

JOBS = 20_000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", action="store_true", help="also XP by 1 and 2 processes")
    parser.add_argument("--no-pgqueuer", action="store_true", help="leave pgqueuer's drain out")
    args = parser.parse_args()
    names = ["Worker c=50"] + ([] if args.no_pgqueuer else ["pgqueuer-asyncpg 5x10"])
    if args.processes:
        names += ["XP 1 process", "XP 2 processes"]
    cores = os.cpu_count() or 1
    db = open_database()
    try:
        migrate(db)
        if not args.no_pgqueuer:
            _pgq.install(db)
        for r in range(args.rounds):
            for name in names:
                vacuum(db, "alkstore.jobs")
                before = machine_busy_seconds()
                if name.startswith("Worker"):
                    fig = _worker.d2(db, JOBS, f"{r} {name}", 50)
                elif name.startswith("XP"):
                    fig = _processes.drain(db, JOBS, int(name.split()[1]), f"{r} {name}")
                else:
                    fig = _pgq.drain(db, "asyncpg", JOBS, 5, 10, f"{r} {name}")
                # XP's children start and stop around its drain: it reads its own.
                busy = fig.extra.get("machine_busy_s", machine_busy_seconds() - before)
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
