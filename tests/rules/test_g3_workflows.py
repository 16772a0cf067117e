"""G3: a workflow's status, and the sweep of finished workflows."""

from __future__ import annotations

from typing import Any

from alkstore_sa import QueueOpts, WorkflowStatus

from ._wf import SyncWorkflow, ack_all


def test_g3_status_counts_disjoint_states(qs: Any) -> None:
    q = qs.queue("g3")
    wf = SyncWorkflow(qs, "counted")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b")
    c = wf.add_job(q, b"c")
    wf.add_job(q, b"d", after=[a])
    wf.add_job(q, b"e", after=[b])
    run = wf.defer()
    before = qs.workflow(run.id)
    assert isinstance(before, WorkflowStatus)
    assert (before.id, before.name, before.total) == (run.id, "counted", 5)
    assert (before.waiting, before.pending, before.processing) == (2, 3, 0)
    assert not before.finished
    handles = {h.id: h for h in q.claim_batch("w", 3)}
    assert handles[run.job_ids[a]].ack()
    assert handles[run.job_ids[b]].fail()
    assert q.cancel(run.job_ids[c])
    s = qs.workflow(run.id)
    counts = (s.waiting, s.pending, s.processing, s.completed, s.dead, s.cancelled)
    assert counts == (0, 1, 0, 1, 2, 1)
    assert sum(counts) == s.total == 5 and not s.finished
    [h] = q.claim_batch("w", 3)
    assert qs.workflow(run.id).processing == 1
    assert h.ack()
    assert qs.workflow(run.id).finished
    assert qs.workflow(run.id + 10_000) is None


def test_g3_sweep_deletes_a_finished_workflow_once_no_row_is_left(qs: Any) -> None:
    q = qs.queue("g3s", QueueOpts(dead_letter_retention=3600))
    wf = SyncWorkflow(qs, "swept")
    a = wf.add_job(q, b"a")
    wf.add_job(q, b"b", after=[a])
    run = wf.defer()
    [h] = q.claim_batch("w", 1)
    assert h.fail()  # a and b dead: finished, but dead rows are kept
    q.sweep_expired()
    assert qs.workflow(run.id).finished  # a dead step kept keeps its workflow
    assert q.purge_dead() == 2
    q.sweep_expired()
    assert qs.workflow(run.id) is None


def test_g3_sweep_keeps_unfinished_workflows(qs: Any) -> None:
    q = qs.queue("g3u")
    wf = SyncWorkflow(qs, "running")
    a = wf.add_job(q, b"a")
    wf.add_job(q, b"b", after=[a])
    run = wf.defer()
    ack_all(q)
    q.sweep_expired()
    assert qs.workflow(run.id).pending == 1
    ack_all(q)
    q.sweep_expired()  # finished, and acked steps keep no row: gone
    assert qs.workflow(run.id) is None
