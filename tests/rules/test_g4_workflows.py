"""G4: a workflow is checked before any SQL; a live unique key writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from alkstore_sa import EnqueueOpts, Limits, Store, Workflow

from ._wf import SyncWorkflow


def _count(engine: Any, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM alkstore.{table}")).scalar_one())


def test_g4_after_names_steps_of_this_workflow_only(qs: Any) -> None:
    q = qs.queue("g4")
    one, other = SyncWorkflow(qs, "one"), SyncWorkflow(qs, "other")
    foreign = other.add_job(q, b"x")
    with pytest.raises(ValueError, match="another workflow"):
        one.add_job(q, b"y", after=[foreign])
    with pytest.raises(TypeError, match="Steps"):
        one.add_job(q, b"y", after=[1])
    with pytest.raises(ValueError, match="no steps"):
        one.defer()


def test_g4_at_most_10000_steps(store: Store) -> None:
    q = store.queue("g4n")
    wf = Workflow(store, name="big")
    for _ in range(10_000):
        wf.add_job(q, b"")
    with pytest.raises(ValueError, match="10,000"):
        wf.add_job(q, b"")


def test_g4_a_queue_of_another_store_is_refused(store: Store, engine: Any) -> None:
    other = Store(engine)
    wf = Workflow(store, name="x")
    with pytest.raises(ValueError, match="another store"):
        wf.add_job(other.queue("g4o"), b"")


def test_g4_a_live_unique_key_writes_nothing(qs: Any, engine: Any) -> None:
    q = qs.queue("g4u")
    q.enqueue(b"holder", EnqueueOpts(unique_key="k"))
    wf = SyncWorkflow(qs, "keyed")
    a = wf.add_job(q, b"a")
    wf.add_job(q, b"b", after=[a], opts=EnqueueOpts(unique_key="k"))
    with pytest.raises(ValueError, match="'k' on queue 'g4u'"):
        wf.defer()
    assert _count(engine, "workflows") == 0
    assert _count(engine, "jobs") == 1
    again = SyncWorkflow(qs, "twice")
    again.add_job(q, b"a", opts=EnqueueOpts(unique_key="j"))
    with pytest.raises(ValueError, match="twice"):
        again.add_job(q, b"b", opts=EnqueueOpts(unique_key="j"))


def test_g4_steps_take_enqueue_opts(qs: Any) -> None:
    q = qs.queue("g4s")
    wf = SyncWorkflow(qs, "opts")
    a = wf.add_job(q, b"a", opts=EnqueueOpts(priority=5, max_attempts=7, delay=3600))
    b = wf.add_job(q, b"b", after=[a], opts=EnqueueOpts(unique_key="later"))
    run = wf.defer()
    job = q.get_job(run.job_ids[a])
    assert (job.priority, job.max_attempts) == (5, 7)
    assert (job.run_at - job.created_at).total_seconds() == 3600
    assert q.get_job(run.job_ids[b]).unique_key == "later"
    assert q.claim_batch("w", 5) == []  # a is not due for an hour


def test_g4_a_key_taken_while_the_step_waited_kills_the_step_not_the_ack(qs: Any) -> None:
    q = qs.queue("g4k")
    wf = SyncWorkflow(qs, "taken")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a], opts=EnqueueOpts(unique_key="late"))
    c = wf.add_job(q, b"c", after=[b])
    run = wf.defer()
    holder = q.enqueue(b"holder", EnqueueOpts(unique_key="late", priority=-1))
    [h] = q.claim_batch("w", 1)
    assert h.id == run.job_ids[a] and h.ack()  # the ack goes through
    dead = q.get_job(run.job_ids[b])
    assert (dead.status, dead.last_error) == ("dead", "unique key late live at promotion")
    assert q.get_job(run.job_ids[c]).last_error == f"upstream job {run.job_ids[b]} dead"
    assert [j.id for j in q.claim_batch("w", 5)] == [holder]


def test_g4_a_step_keeps_its_group_while_waiting_and_once_promoted(qs: Any) -> None:
    # F3 x G1: the group rides with the waiting step into jobs, so the step
    # obeys its group's limits like any grouped job.
    q = qs.queue("g4g")
    q.set_limits(Limits(group_concurrency=1))
    wf = SyncWorkflow(qs, "grouped")
    a = wf.add_job(q, b"a", opts=EnqueueOpts(group="tenant-7"))
    b = wf.add_job(q, b"b", after=[a], opts=EnqueueOpts(group="tenant-7"))
    run = wf.defer()
    waiting = q.get_job(run.job_ids[b])
    assert (waiting.group, waiting.waiting_on) == ("tenant-7", (run.job_ids[a],))
    [first] = q.claim_batch("w", 5)
    assert (first.id, first.job.group) == (run.job_ids[a], "tenant-7")
    assert first.ack()
    [second] = q.claim_batch("w", 5)  # promoted by a's ack, the group's one slot free
    assert (second.id, second.job.group) == (run.job_ids[b], "tenant-7")
