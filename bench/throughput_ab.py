"""W2's throughput counters on D2, A/B in one process: ``python -m bench.throughput_ab``.

The same checkout, server and database; drains of one sync ``Worker`` (D2's
shape) alternate between the counters on (as shipped) and off (the tally
and the flush task replaced by no-ops), in ABBA order, so the machine's
drift hits both alike.  Prints each drain, then the medians and the
pairwise on/off ratios of the drain rate and of the process's CPU per job.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from alkstore_sa.worker import _outcomes, _throughput

from . import _worker
from ._db import migrate, open_database, vacuum

_ON = (_outcomes.Reporter._tally, _throughput.Throughput.run, _throughput.Throughput.flush)


async def _idle(self: Any) -> None:
    await asyncio.Event().wait()


async def _nothing(self: Any) -> None:
    return None


def _counters(on: bool) -> None:
    tally, run, flush = _ON if on else ((lambda self, qs, i: None), _idle, _nothing)
    _outcomes.Reporter._tally = tally  # type: ignore[method-assign]
    _throughput.Throughput.run = run  # type: ignore[method-assign]
    _throughput.Throughput.flush = flush  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    db = open_database()
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        migrate(db)
        order = [False, True, True, False] * ((args.pairs + 1) // 2)
        for i, on in enumerate(order[: 2 * args.pairs]):
            _counters(on)
            vacuum(db, "alkstore.jobs")
            fig = _worker.d2(db, args.jobs, f"{i} counters {'on' if on else 'off'}")
            rate, cpu = fig.jobs / fig.seconds, fig.extra["cpu_us_per_job"]
            results[on].append((rate, cpu))
            state = "on " if on else "off"
            print(f"{i:>2} {state} {rate:>7.0f} jobs/s {cpu:>6.1f} us/job", flush=True)
    finally:
        _counters(True)
        db.drop()
    for on in (False, True):
        got = results[on]
        print(
            f"{'on ' if on else 'off'} median {statistics.median(r for r, _ in got):.0f} jobs/s, "
            f"{statistics.median(c for _, c in got):.1f} us/job"
        )
    pairs = list(zip(results[False], results[True], strict=False))
    print("rate on/off:", sorted(round(b[0] / a[0], 3) for a, b in pairs))
    print("cpu  on/off:", sorted(round(b[1] / a[1], 3) for a, b in pairs))


if __name__ == "__main__":
    main()
