"""H1 : a heartbeat that extends a claim rewrites no indexed column.

The lapse index keys on ``deadline_floor`` (a lower bound of
``claim_deadline``), so an extension can be a HOT update; a heartbeat that
shortens a claim lowers the floor, so the claim still lapses on time (Q15,
Q11).  HOT is read from PostgreSQL's own per-transaction counters.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Engine, text

from alkstore_sa import QueueOpts, Store
from alkstore_sa.store import queue_parts, run_call

from .._qtools import handle_core, live_row

COUNTS = text(
    "SELECT pg_stat_get_xact_tuples_updated(CAST('alkstore.jobs' AS regclass)),"
    " pg_stat_get_xact_tuples_hot_updated(CAST('alkstore.jobs' AS regclass))"
)


def _updates_in(conn: Connection, store: Store, call: Any) -> tuple[int, int]:
    """(updates, HOT updates) of ``jobs`` made by ``call``, run in ``conn``'s transaction."""
    before = conn.execute(COUNTS).one()
    run_call(store, call, conn)  # type: ignore[arg-type]
    after = conn.execute(COUNTS).one()
    return after[0] - before[0], after[1] - before[1]


def test_hot_heartbeats_a_claim_sets_the_floor_to_its_deadline(engine: Engine) -> None:
    with Store(engine) as store:
        q = store.queue("h1")
        q.enqueue(b"x")
        (h,) = q.claim_batch("w", 1)
        row = live_row(engine, h.id)
        assert row["deadline_floor"] == row["claim_deadline"] is not None


def test_hot_heartbeats_an_extending_heartbeat_is_a_hot_update(engine: Engine) -> None:
    with Store(engine) as store:
        q = store.queue("h1", QueueOpts(visibility_timeout=30))
        q.enqueue_many([b"a", b"b", b"c"])
        one, *held = q.claim_batch("w", 3)
        _, core = queue_parts(q)
        floor = live_row(engine, one.id)["deadline_floor"]
        with engine.connect() as conn, conn.begin():
            # The handle's heartbeat (Q15) and the worker's batched one.
            assert _updates_in(conn, store, handle_core(one).heartbeat(120)) == (1, 1)
            claims = [(h.id, h.job.attempts) for h in held]
            assert _updates_in(conn, store, core.heartbeat_claims(claims)) == (2, 2)
        row = live_row(engine, one.id)
        assert row["deadline_floor"] == floor < row["claim_deadline"]


def test_q15_h1_a_shortened_claim_lapses_on_time_and_is_reclaimed(qs: Any) -> None:
    q = qs.queue("h1", QueueOpts(visibility_timeout=30))
    q.enqueue(b"x")
    (h,) = q.claim_batch("w", 1)
    assert h.heartbeat(0.05) is True  # the deadline comes 30 s closer
    time.sleep(0.1)
    taken = q.claim_one("other")
    assert taken is not None and taken.id == h.id and taken.job.attempts == 2
