"""What a sleeping sync handler costs the Worker's thread pool: ``python -m bench.handoff_cost``.

No database: 20,000 callables through the Worker's handler ``Lane`` (its
thread pool, ``worker/_threads.py``) at 32 at a time, a no-op and a 1 ms
``time.sleep``, alternated.  Prints the process's CPU per job (all
threads) and the rate.  The difference between the two is the price of
the thread hand-offs a handler that blocks causes (the thread sleeps on
the work queue and is woken, gives the GIL up and takes it back), which a
no-op handler mostly avoids; D3 in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from alkstore_sa.worker._threads import Lane

JOBS = 20_000
CONCURRENCY = 32


async def _drain(sleep: float) -> tuple[float, float]:
    lane = Lane(asyncio.get_running_loop(), CONCURRENCY, "handoff")
    slots = asyncio.Semaphore(CONCURRENCY)

    def job() -> None:
        if sleep:
            time.sleep(sleep)

    async def one() -> None:
        async with slots:
            await lane.submit(job)

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(JOBS)))
    c1, t1 = time.process_time(), time.perf_counter()
    lane.close()
    return (c1 - c0) / JOBS * 1e6, JOBS / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.handoff_cost")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    cpu: dict[float, list[float]] = {0.0: [], 0.001: []}
    for r in range(args.rounds):
        for sleep in (0.0, 0.001) if r % 2 == 0 else (0.001, 0.0):
            us, rate = asyncio.run(_drain(sleep))
            cpu[sleep].append(us)
            print(f"sleep {sleep * 1000:g} ms: {us:5.1f} us CPU/job, {rate:7.0f} jobs/s")
    noop, slept = (statistics.median(cpu[k]) for k in (0.0, 0.001))
    print(f"median CPU/job: no-op {noop:.1f} us, sleep 1 ms {slept:.1f} us (+{slept - noop:.1f})")


if __name__ == "__main__":
    main()
