"""QueueOpts(max_payload_bytes=...) : too big a payload is refused before any SQL.

A queue handle's limit applies to every enqueue through it (one payload,
a batch, keyed batches, tasks' envelopes): a payload over it raises
``ValueError`` naming its size and the limit, and nothing of the call is
written.  The default is 10 MiB (V7); ``None`` lifts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alkstore_sa import EnqueueOpts, QueueOpts
from alkstore_sa._values.opts import DEFAULT_MAX_PAYLOAD_BYTES

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


def test_max_payload_bytes_is_validated(qs: Any) -> None:
    q = qs.queue("big")
    assert q.get_job(q.enqueue(b"x" * 1_000_000)).payload == b"x" * 1_000_000
    with pytest.raises(ValueError):
        QueueOpts(max_payload_bytes=0)
    with pytest.raises(TypeError):
        QueueOpts(max_payload_bytes=1.5)  # type: ignore[arg-type]


def test_v7_default_max_payload_bytes_refuses_200_mib_and_none_lifts_it(
    qs: Any, spy: SqlSpy
) -> None:
    # The reproduction: a 200 MiB payload was accepted by default (11.5 s).
    assert QueueOpts().max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES == 10 * 1024 * 1024
    huge = b"x" * (200 * 1024 * 1024)
    q = qs.queue("big")
    before = spy.count
    with pytest.raises(ValueError, match=r"209,715,200 bytes.*max_payload_bytes=10,485,760"):
        q.enqueue(huge)
    with pytest.raises(ValueError, match="None lifts the cap"):
        q.enqueue_many([b"ok", huge])
    assert spy.count == before  # refused before any SQL
    del huge
    at_cap = b"y" * DEFAULT_MAX_PAYLOAD_BYTES
    assert q.get_job(q.enqueue(at_cap)).payload == at_cap
    with pytest.raises(ValueError, match="max_payload_bytes"):
        q.enqueue(at_cap + b"z")
    # None lifts the cap: one byte over the default goes through an uncapped handle.
    lifted = qs.queue("big", QueueOpts(max_payload_bytes=None))
    assert len(lifted.get_job(lifted.enqueue(at_cap + b"z")).payload) == len(at_cap) + 1
