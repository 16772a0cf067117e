"""G2: a step that dies takes every step downstream of it to dead in the same
transaction; a cancel cancels them; requeue_dead puts a step back waiting."""

from __future__ import annotations

import time
from typing import Any

from alkstore_sa import EnqueueOpts, QueueOpts

from ._wf import SyncWorkflow, ack_all


def _chain_with_fork(qs: Any, q: Any) -> tuple[Any, dict[str, int]]:
    """a -> b -> c, and a -> d (d after a only); e after b and d."""
    wf = SyncWorkflow(qs, "fork")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a])
    c = wf.add_job(q, b"c", after=[b])
    d = wf.add_job(q, b"d", after=[a])
    e = wf.add_job(q, b"e", after=[b, d])
    run = wf.defer()
    return run, {k: run.job_ids[s] for k, s in zip("abcde", (a, b, c, d, e), strict=True)}


def _statuses(q: Any, ids: dict[str, int]) -> dict[str, str | None]:
    out = {}
    for k, i in ids.items():
        job = q.get_job(i)
        out[k] = None if job is None else job.status
    return out


def test_g2_fail_buries_every_downstream_step_transitively(qs: Any) -> None:
    q = qs.queue("g2")
    run, ids = _chain_with_fork(qs, q)
    assert ack_all(q) == [ids["a"]]
    handles = {h.id: h for h in q.claim_batch("w", 10)}
    assert set(handles) == {ids["b"], ids["d"]}
    assert handles[ids["b"]].fail("boom")
    # c and e (e waits on b too) died with b, in fail()'s own transaction.
    assert _statuses(q, ids) == {
        "a": None,
        "b": "dead",
        "c": "dead",
        "d": "processing",
        "e": "dead",
    }
    c = q.get_job(ids["c"])
    assert c.last_error == f"upstream job {ids['b']} dead"
    assert c.errors[-1].error == c.last_error
    assert q.get_job(ids["e"]).last_error == f"upstream job {ids['b']} dead"
    # d's ack promotes nothing: e is dead, not waiting.
    assert handles[ids["d"]].ack()
    assert q.claim_batch("w", 10) == []
    status = qs.workflow(run.id)
    assert (status.completed, status.dead, status.finished) == (2, 3, True)


def test_g2_retry_at_budget_buries_downstream(qs: Any) -> None:
    q = qs.queue("g2r", QueueOpts(max_attempts=1))
    _run, ids = _chain_with_fork(qs, q)
    [h] = q.claim_batch("w", 10)
    assert h.retry("again")  # no attempt left: dead
    assert _statuses(q, ids) == dict.fromkeys("abcde", "dead")
    assert q.get_job(ids["e"]).last_error == f"upstream job {ids['a']} dead"


def test_g2_lapsed_claim_buried_by_the_claim_buries_downstream(qs: Any) -> None:
    q = qs.queue("g2l", QueueOpts(max_attempts=1, visibility_timeout=0.2))
    _run, ids = _chain_with_fork(qs, q)
    assert [h.id for h in q.claim_batch("w", 10)] == [ids["a"]]
    time.sleep(0.3)
    assert q.claim_batch("w", 10) == []  # Q12: the claim buries a, and a's steps with it
    assert _statuses(q, ids) == dict.fromkeys("abcde", "dead")
    assert q.get_job(ids["a"]).last_error == "max attempts exceeded"
    assert q.get_job(ids["c"]).last_error == f"upstream job {ids['a']} dead"


def test_g2_expiry_sweep_buries_downstream(qs: Any) -> None:
    q = qs.queue("g2x")
    wf = SyncWorkflow(qs, "expiring")
    a = wf.add_job(q, b"a", opts=EnqueueOpts(expires_in=0.1))
    b = wf.add_job(q, b"b", after=[a])
    run = wf.defer()
    time.sleep(0.2)
    assert q.sweep_expired().expired == 1
    dead = q.get_job(run.job_ids[b])
    assert dead.status == "dead"
    assert dead.last_error == f"upstream job {run.job_ids[a]} dead"


def test_g2_cancel_of_a_live_step_cancels_its_downstream(qs: Any) -> None:
    q = qs.queue("g2c")
    run, ids = _chain_with_fork(qs, q)
    assert q.cancel(ids["a"]) is True
    assert _statuses(q, ids) == dict.fromkeys("abcde")
    status = qs.workflow(run.id)
    assert (status.cancelled, status.total, status.finished) == (5, 5, True)
    assert q.claim_batch("w", 10) == []


def test_g2_cancel_of_a_waiting_step_cancels_it_and_its_downstream(qs: Any) -> None:
    q = qs.queue("g2cw")
    run, ids = _chain_with_fork(qs, q)
    assert q.cancel(ids["b"]) is True
    assert q.cancel(ids["b"]) is False
    assert _statuses(q, ids) == {"a": "pending", "b": None, "c": None, "d": "pending", "e": None}
    assert ack_all(q) == [ids["a"]]
    assert ack_all(q) == [ids["d"]]  # d runs; c and e were cancelled with b
    assert ack_all(q) == []
    status = qs.workflow(run.id)
    assert (status.completed, status.cancelled, status.finished) == (2, 3, True)


def test_g2_requeue_of_dead_steps_runs_the_rest(qs: Any) -> None:
    q = qs.queue("g2q")
    run, ids = _chain_with_fork(qs, q)
    assert ack_all(q) == [ids["a"]]
    handles = {h.id: h for h in q.claim_batch("w", 10)}
    assert handles[ids["b"]].fail("boom")
    # Requeue e first: b is not acked, d not yet either -- e waits on both.
    assert q.requeue_dead([ids["e"]]) == 1
    e = q.get_job(ids["e"])
    assert (e.status, e.waiting_on) == ("pending", (ids["b"], ids["d"]))
    assert handles[ids["d"]].ack()
    assert q.get_job(ids["e"]).waiting_on == (ids["b"],)
    assert q.claim_batch("w", 10) == []
    # Now b: nothing it waits on is unacked, so it is claimable at once.
    assert q.requeue_dead([ids["b"]]) == 1
    assert q.get_job(ids["b"]).waiting_on == ()
    assert ack_all(q) == [ids["b"]]
    assert ack_all(q) == [ids["e"]]  # e was waiting on b only
    assert q.requeue_dead([ids["c"]]) == 1  # c's upstream b is acked: claimable
    assert ack_all(q) == [ids["c"]]
    status = qs.workflow(run.id)
    assert (status.completed, status.dead, status.finished) == (5, 0, True)
