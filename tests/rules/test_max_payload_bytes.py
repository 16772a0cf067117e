"""QueueOpts(max_payload_bytes=...) : too big a payload is refused before any SQL.

A queue handle's limit applies to every enqueue through it (one payload,
a batch, keyed batches, tasks' envelopes): a payload over it raises
``ValueError`` naming its size and the limit, and nothing of the call is
written.  The default is no limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alkstore_sa import EnqueueOpts, QueueOpts

from .._sqlspy import SqlSpy, sync_engine_of


@pytest.fixture
def spy(qs: Any) -> Iterator[SqlSpy]:
    s = SqlSpy(sync_engine_of(qs))
    yield s
    s.close()


def test_max_payload_bytes_refuses_a_bigger_payload_before_any_sql(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("small", QueueOpts(max_payload_bytes=8))
    before = spy.count
    with pytest.raises(ValueError, match=r"the payload is 9 bytes.*max_payload_bytes=8"):
        q.enqueue(b"x" * 9)
    with pytest.raises(ValueError, match=r"payload 1 is 100 bytes"):
        q.enqueue_many([b"ok", b"y" * 100, b"ok"])
    with pytest.raises(ValueError, match="max_payload_bytes"):
        q.enqueue_many([b"z" * 9], EnqueueOpts(unique_key="k"))
    assert spy.count == before  # nothing reached the database
    assert q.stats().due == 0


def test_max_payload_bytes_takes_a_payload_of_exactly_the_limit(qs: Any) -> None:
    q = qs.queue("small", QueueOpts(max_payload_bytes=8))
    job_id = q.enqueue(b"x" * 8)
    assert q.get_job(job_id).payload == b"x" * 8
    assert len(q.enqueue_many([b"a" * 8, b"b"])) == 2


def test_max_payload_bytes_is_none_by_default_and_validated(qs: Any) -> None:
    assert QueueOpts().max_payload_bytes is None
    q = qs.queue("big")
    assert q.get_job(q.enqueue(b"x" * 1_000_000)).payload == b"x" * 1_000_000
    with pytest.raises(ValueError):
        QueueOpts(max_payload_bytes=0)
    with pytest.raises(TypeError):
        QueueOpts(max_payload_bytes=1.5)  # type: ignore[arg-type]
