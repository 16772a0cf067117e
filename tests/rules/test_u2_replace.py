"""U2: ``on_conflict="replace"`` -- a keyed enqueue replaces its key's pending job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alkstore_sa import EnqueueOpts


def test_u2_replace_overwrites_a_pending_job_and_returns_its_id(qs: Any) -> None:
    q = qs.queue("u2")
    first = q.enqueue(b"v1", EnqueueOpts(unique_key="k", priority=1, group="a", delay=3600))
    when = datetime.now(UTC) + timedelta(seconds=5)
    again = q.enqueue(
        b"v2", EnqueueOpts(unique_key="k", on_conflict="replace", run_at=when, group="b")
    )
    assert again == first
    job = q.get_job(first)
    assert (job.payload, job.priority, job.group) == (b"v2", 0, "b")  # the queue's priority
    assert abs((job.run_at - when).total_seconds()) < 1e-3
    assert len(q.jobs("pending")) == 1


def test_u2_replace_leaves_a_processing_job_alone(qs: Any) -> None:
    q = qs.queue("u2-busy")
    first = q.enqueue(b"v1", EnqueueOpts(unique_key="k"))
    [h] = q.claim_batch("w", 1)
    again = q.enqueue(b"v2", EnqueueOpts(unique_key="k", on_conflict="replace"))
    assert again == first
    assert q.get_job(first).payload == b"v1"
    assert h.ack() is True
    new = q.enqueue(b"v3", EnqueueOpts(unique_key="k", on_conflict="replace"))
    assert new != first and q.get_job(new).payload == b"v3"


def test_u2_keep_is_the_default_and_keeps_the_first(qs: Any) -> None:
    q = qs.queue("u2-keep")
    first = q.enqueue(b"v1", EnqueueOpts(unique_key="k"))
    assert q.enqueue(b"v2", EnqueueOpts(unique_key="k", on_conflict="keep")) == first
    assert q.get_job(first).payload == b"v1"


def test_u2_replace_in_enqueue_many_the_last_write_wins(qs: Any) -> None:
    q = qs.queue("u2-many")
    ids = q.enqueue_many(
        [b"a", b"b", b"c"],
        EnqueueOpts(on_conflict="replace"),
        unique_keys=["k", None, "k"],
    )
    assert ids[0] == ids[2] != ids[1]
    assert q.get_job(ids[0]).payload == b"c"


def test_u2_any_other_value_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        EnqueueOpts(unique_key="k", on_conflict="ignore")
    with pytest.raises(TypeError):
        EnqueueOpts(unique_key="k", on_conflict=None)  # type: ignore[arg-type]
