"""Q6 for every write: with ``session=`` each one is part of the caller's transaction.

``cancel``, ``ack_batch``, ``claim_one``/``claim_batch``, ``sweep_expired``
and the handle's ``retry``/``fail``/``heartbeat`` (as ``enqueue``, ``ack``,
``requeue_dead``, ``purge_dead``, ``pause`` and ``resume`` did already): a
rollback undoes the write, a commit keeps it.  Both faces, each driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from alkstore_sa import EnqueueOpts, QueueOpts, Store


@contextmanager
def _tx(qs: Any, outcome: str) -> Iterator[Any]:
    """A session of ``qs``'s face, committed or rolled back at the end."""
    if isinstance(qs, Store):
        with Session(qs.engine) as session:
            yield session
            getattr(session, outcome)()
        return
    loop = object.__getattribute__(qs, "_loop")
    asession = AsyncSession(qs.wrapped.engine)
    try:
        yield asession
        loop.run(getattr(asession, outcome)())
    finally:
        loop.run(asession.close())


def _state(engine: Engine, job_id: int) -> tuple[str, int] | None:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT status, attempts FROM alkstore.jobs WHERE id = :i UNION ALL"
                " SELECT 'dead', attempts FROM alkstore.dead_jobs WHERE id = :i"
            ),
            {"i": job_id},
        ).first()
    return None if row is None else (row[0], row[1])


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_q6_every_write_follows_the_callers_transaction(
    qs: Any, engine: Engine, outcome: str
) -> None:
    kept = outcome == "commit"
    q = qs.queue("q6w", QueueOpts(max_attempts=5))

    job_id = q.enqueue(b"c")
    with _tx(qs, outcome) as s:
        assert q.cancel(job_id, session=s) is True
    assert _state(engine, job_id) == (None if kept else ("pending", 0))

    q = qs.queue("q6claim", QueueOpts(max_attempts=5))
    job_id = q.enqueue(b"claim")
    with _tx(qs, outcome) as s:
        [handle] = q.claim_batch("w", 1, session=s)
        assert handle.id == job_id
    assert _state(engine, job_id) == (("processing", 1) if kept else ("pending", 0))
    if kept:
        q.cancel(job_id)
    with _tx(qs, outcome) as s:
        one = q.claim_one("w", session=s)
        assert one is None if kept else one is not None

    q = qs.queue("q6handle", QueueOpts(max_attempts=5))
    q.enqueue_many([b"r", b"f", b"h", b"a"])
    for h in q.claim_batch("w", 4):
        before = _state(engine, h.id)
        with _tx(qs, outcome) as s:
            if h.job.payload == b"r":
                assert h.retry("later", delay=60, session=s) is True
                after = ("pending", 1)
            elif h.job.payload == b"f":
                assert h.fail("no", session=s) is True
                after = ("dead", 1)
            elif h.job.payload == b"h":
                assert h.heartbeat(3600, session=s) is True
                after = before
            else:
                assert q.ack_batch([h.id], session=s) == 1
                after = None
        assert _state(engine, h.id) == (after if kept else before)
        if h.job.payload == b"h":
            job = q.get_job(h.id)
            assert job is not None and job.claim_deadline is not None
            lasts = (job.claim_deadline - job.run_at).total_seconds()
            assert (lasts > 3000) is kept

    q = qs.queue("q6sweep")
    expired = q.enqueue(b"e", EnqueueOpts(expires_in=60))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE alkstore.jobs SET expires_at = now() - interval '1 s' WHERE id = :i"),
            {"i": expired},
        )
    with _tx(qs, outcome) as s:
        assert q.sweep_expired(session=s).expired == 1
    assert _state(engine, expired) == (("dead", 0) if kept else ("pending", 0))
