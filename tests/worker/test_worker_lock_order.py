"""The worker's batched acks and heartbeats lock their rows in id order.

Both flushes run at once on different connections (a job can finish while
the heartbeat that still counts it is in flight), and each waits for row
locks rather than skipping them.  Two statements that lock overlapping rows
in different orders can deadlock; PostgreSQL would break it by failing one
of them.  Locking in ascending id order, whatever order the claims come in,
rules that out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from alkstore_sa import Store


def _locked_by_someone(engine: Engine, job_id: int) -> bool:
    with engine.connect() as conn:
        try:
            conn.execute(
                text("SELECT 1 FROM alkstore.jobs WHERE id = :i FOR UPDATE NOWAIT"), {"i": job_id}
            )
        except OperationalError:
            return True
        finally:
            conn.rollback()
    return False


@pytest.mark.parametrize("flush", ["ack_claims", "heartbeat_claims"])
def test_q27_batched_flushes_lock_rows_in_id_order(store: Store, flush: str) -> None:
    q = store.queue("order")
    q.enqueue_many([b"1", b"2", b"3"])
    first, middle, last = q.claim_batch("w", 3)
    # Newest row versions last in the heap: a sequential scan meets them 3, 2, 1.
    for handle in (last, middle, first):
        assert handle.heartbeat(30)
    claims = [(h.id, h.job.attempts) for h in (last, middle, first)]  # descending ids
    call: Callable[[Any], list[int]] = getattr(q._core, flush)(claims)
    done = threading.Event()
    outcome: list[list[int]] = []

    with store.engine.connect() as holder:  # another transaction holds the middle row
        holder.execute(
            text("SELECT 1 FROM alkstore.jobs WHERE id = :i FOR UPDATE"), {"i": middle.id}
        )

        def flush_all() -> None:
            outcome.append(store._run(call))
            done.set()

        runner = threading.Thread(target=flush_all)
        runner.start()
        deadline = time.monotonic() + 5
        while not _locked_by_someone(store.engine, first.id):
            assert time.monotonic() < deadline, "the flush never locked the lowest id"
            time.sleep(0.01)
        assert not done.is_set()  # it waits on the middle row ...
        assert not _locked_by_someone(store.engine, last.id)  # ... and has not reached the last
        holder.rollback()
    runner.join(5)
    assert sorted(outcome[0]) == sorted(h.id for h in (first, middle, last))
