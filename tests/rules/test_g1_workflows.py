"""G1: a step becomes claimable once every step it comes after has been acked."""

from __future__ import annotations

from typing import Any

from ._wf import SyncWorkflow, ack_all, claim_ids


def test_g1_diamond_runs_in_order(qs: Any) -> None:
    q = qs.queue("g1")
    wf = SyncWorkflow(qs, "diamond")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a])
    c = wf.add_job(q, b"c", after=[a])
    d = wf.add_job(q, b"d", after=[b, c])
    run = wf.defer()
    ids = run.job_ids
    assert ack_all(q) == [ids[a]]
    assert ack_all(q) == sorted([ids[b], ids[c]])
    assert ack_all(q) == [ids[d]]
    assert ack_all(q) == []
    status = qs.workflow(run.id)
    assert status.total == 4 and status.completed == 4 and status.finished
