"""F2, F5 on the limited claim's one-round-trip form (issue 26's FQ, ``_db/flow.py``).

Once a queue object has read its queue's limits, its next limited claims send
the settings-row lock, the claim and the COMMIT in one psycopg pipeline, the
claim running on the limits it saw last and guarded to claim nothing unless
they are still the row's.  These pin what that form must keep: a limit
changed or a pause set by another store since the last read is obeyed by the
very next claim, limits removed fall back to a full claim, and a statement
that fails inside the pipeline leaves the connection outside any transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.exc import OperationalError

from alkstore_sa import Limits, Store
from alkstore_sa._db import execute as _execute


@pytest.fixture
def one_go(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many limited claims went in one round trip (each call's statement count)."""
    sent: list[int] = []
    real = _execute.fetch_in_one_go

    def counted(conn: Any, address: Any, calls: Any, **kw: Any) -> Any:
        result = real(conn, address, calls, **kw)
        if result is not None:
            sent.append(len(calls))
        return result

    monkeypatch.setattr("alkstore_sa._db.flow.fetch_in_one_go", counted)
    return sent


@pytest.fixture
def other(engine: Engine) -> Iterator[Store]:
    """A second store on the same database: another process's view of the queue."""
    with Store(engine) as store:
        yield store


def _limited_and_read(store: Store, concurrency: int) -> Any:
    """A queue of 30 jobs with ``concurrency`` set, whose object has read its limits
    (one job claimed the two-step way): its next claim goes in one round trip."""
    q = store.queue("onego")
    q.set_limits(Limits(concurrency=concurrency))
    q.enqueue_many([b"x"] * 30)
    assert len(q.claim_batch("w", 1)) == 1
    return q


def test_f2_after_the_first_read_a_limited_claim_is_one_round_trip(
    store: Store, one_go: list[int]
) -> None:
    q = store.queue("onego")
    q.set_limits(Limits(concurrency=50))
    q.enqueue_many([b"x"] * 30)
    assert len(q.claim_batch("w", 10)) == 10  # reads the limits the two-step way
    assert one_go == []
    assert len(q.claim_batch("w", 10)) == 10
    assert one_go == [2]  # the lock and the claim, behind one BEGIN and one COMMIT


def test_f2_a_limit_lowered_by_another_store_binds_the_very_next_claim(
    store: Store, other: Store, one_go: list[int]
) -> None:
    q = _limited_and_read(store, 10)
    other.queue("onego").set_limits(Limits(concurrency=2))
    # The queue object still believes 10: its one-go claim is guarded empty and
    # made again on the row's limit -- one slot left, not nine.
    assert len(q.claim_batch("w", 10)) == 1
    assert one_go == [2]
    assert q.stats().processing == 2


def test_f5_a_pause_set_by_another_store_stops_the_very_next_claim(
    store: Store, other: Store, one_go: list[int]
) -> None:
    q = _limited_and_read(store, 10)
    other.queue("onego").pause()
    assert q.claim_batch("w", 10) == []
    assert one_go == [2]
    assert q.stats().processing == 1


def test_f1_limits_removed_by_another_store_give_a_full_claim(
    store: Store, other: Store, one_go: list[int]
) -> None:
    q = _limited_and_read(store, 2)
    other.queue("onego").set_limits(None)
    assert len(q.claim_batch("w", 10)) == 10
    assert one_go == [2]


def test_f2_a_failure_inside_the_round_trip_leaves_no_transaction_open(
    database_url: URL, other: Store, one_go: list[int]
) -> None:
    engine = create_engine(
        database_url, pool_size=1, max_overflow=0, connect_args={"options": "-c lock_timeout=200"}
    )
    # The state the connection is handed back to the pool in, before the pool's
    # own reset (a rollback) could hide a transaction left open.
    returned: list[str] = []
    event.listen(
        engine,
        "reset",
        lambda dbapi, _record, _state: returned.append(dbapi.info.transaction_status.name),
    )
    try:
        with Store(engine) as store:
            q = _limited_and_read(store, 10)
            assert len(q.claim_batch("w", 1)) == 1
            assert one_go == [2]
            with other.engine.begin() as holder:  # another claim's lock, held
                holder.exec_driver_sql(
                    "SELECT 1 FROM alkstore.paused_queues WHERE queue = 'onego' FOR UPDATE"
                )
                returned.clear()
                with pytest.raises(OperationalError, match="lock"):
                    q.claim_batch("w", 10)
                assert returned == ["IDLE"]
            assert q.stats().processing == 2  # nothing claimed by the failed round trip
            assert len(q.claim_batch("w", 10)) == 8
    finally:
        engine.dispose()
