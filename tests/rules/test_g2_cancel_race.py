"""G2 x C1: a cancel of a waiting step racing the ack (or the death) of its upstream,
from two connections at once, never deadlocks and ends in one of the states the
two would reach one after the other: after an ack, the step and everything after
it cancelled (waiting or just promoted), none of them left in ``jobs``; after a
death, the same, or all of them dead when the death came first.

Every change to a workflow's waiting steps takes the workflow's row lock first
(the ack's promotion, the death's cascade, the cancel): without that order the
cancel's mark on the step and the ack's count on it were taken in opposite
orders and PostgreSQL aborted one of them (40P01).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import Engine

from .._qtools import sql
from ._wf import SyncWorkflow

ROUNDS = 200


def _race(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Both calls at once from two threads (two connections); their results, or
    the first error either raised."""
    start = threading.Barrier(2)
    out: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], Any]) -> None:
        start.wait()
        try:
            out[i] = call()
        except BaseException as exc:  # the test reports it below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out[0], out[1]


def _rounds(qs: Any, engine: Engine, name: str, settle: str) -> None:
    """``ROUNDS`` times: u -> x -> y; u claimed; ``settle`` u (ack or fail) while
    x is cancelled."""
    q = qs.queue(name)
    for _ in range(ROUNDS):
        wf = SyncWorkflow(qs, name)
        u = wf.add_job(q, b"u")
        x = wf.add_job(q, b"x", after=[u])
        y = wf.add_job(q, b"y", after=[x])
        run = wf.defer()
        [handle] = q.claim_batch("w", 10)
        ids = run.job_ids
        settle_it = handle.ack if settle == "ack" else partial(handle.fail, "boom")
        settled, cancelled = _race(settle_it, partial(q.cancel, ids[x]))
        assert settled is True
        # An ack: x is cancelled, waiting or just promoted.  A death: x is
        # cancelled, or buried first (then there is nothing left to cancel).
        assert cancelled is True or settle == "fail"
        rows = sql(
            engine,
            "SELECT count(*) AS n FROM alkstore.jobs WHERE id = ANY(:ids)",
            ids=[ids[x], ids[y]],
        )
        assert rows[0]["n"] == 0
        status = qs.workflow(run.id)
        if settle == "ack":
            assert (status.completed, status.cancelled, status.finished) == (1, 2, True)
        elif cancelled:
            assert (status.dead, status.cancelled, status.finished) == (1, 2, True)
        else:
            assert (status.dead, status.cancelled, status.finished) == (3, 0, True)
    assert q.claim_batch("w", 10) == []


def test_g2_cancel_of_a_waiting_step_racing_its_upstreams_ack(qs: Any, engine: Engine) -> None:
    _rounds(qs, engine, "g2-race-ack", "ack")


def test_g2_cancel_of_a_waiting_step_racing_its_upstreams_death(qs: Any, engine: Engine) -> None:
    _rounds(qs, engine, "g2-race-fail", "fail")
