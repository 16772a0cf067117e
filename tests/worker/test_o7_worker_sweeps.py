"""O7: a worker sweeps its queues (Q25) at start and every ``sweep_interval``.

The schedule itself is pinned on the fake clock (``test_worker_timing.py``);
here a real worker's first sweep moves expired rows to dead and purges dead
rows past the handle's ``dead_letter_retention``, on both worker kinds.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import QueueOpts, Store

from .._qtools import age_dead, dead_row, expire
from .._workers import KINDS, handler, start_worker, wait_for, worker_class

RETAIN = QueueOpts(dead_letter_retention=60)


@pytest.mark.parametrize("kind", KINDS)
def test_o7_worker_sweeps_expired_and_old_dead_rows_with_the_handles_options(
    kind: str, database_url: URL, store: Store, engine: Engine
) -> None:
    q = store.queue("o7", RETAIN)
    expired, old_dead = q.enqueue_many([b"expired", b"old"])
    handles = {h.id: h for h in q.claim_batch("someone", 2)}
    handles[old_dead].fail("poison")
    handles[expired].retry(delay=3600)  # pending and not due: the worker will not claim it
    expire(engine, expired)
    age_dead(engine, old_dead, 120)
    ran = threading.Event()

    def never(job: Any) -> None:
        ran.set()

    # The worker's first claim parks expired rows (S3) while its first sweep
    # runs, and the sweep skips a row a claim holds (SKIP LOCKED): such a row
    # is swept by the next sweep, so the interval is short here.
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)(
            {s.queue("o7", RETAIN): handler(kind, never)}, sweep_interval=0.2
        ),
    )
    try:
        wait_for(lambda: dead_row(engine, old_dead) is None and q.get_job(expired).status == "dead")
    finally:
        running.stop()
    job = q.get_job(expired)
    assert job is not None and job.last_error == "expired"
    assert not ran.is_set()  # swept, never handed to the handler
