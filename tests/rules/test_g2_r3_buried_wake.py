"""G2 x R3: a waiter on a downstream step is woken when G2's cascade buries the step,
at the commit of the upstream's death, not by its next re-poll (1 s)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from alkstore_sa import JobDeadError, QueueOpts, Tasks
from alkstore_sa._extras.waiters import POLL_INTERVAL

from .._api import SyncView
from ._wf import SyncWorkflow

# Well under the re-poll: only the done channel's notification wakes a waiter this soon.
WOKEN_WITHIN = 0.5


def _report(x: int) -> int:
    return x


def _kill_later(handle: Any, how: str, died: list[float]) -> threading.Thread:
    """Kill the claimed upstream 0.3 s from now (fail, or retry with no attempt
    left); note when its transaction had committed."""

    def run() -> None:
        time.sleep(0.3)
        assert (handle.fail("gone") if how == "fail" else handle.retry("gone", delay=0)) is True
        died.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("how", ["fail", "retry"])
def test_g2_a_buried_step_wakes_its_waiter_before_the_poll(qs: Any, how: str) -> None:
    assert WOKEN_WITHIN <= POLL_INTERVAL / 2
    q = qs.queue("g2-wake", QueueOpts(max_attempts=1))
    wf = SyncWorkflow(qs, "wake")
    up = wf.add_job(q, b"u")
    mid = wf.add_job(q, b"m", after=[up])
    down = wf.add_job(q, b"d", after=[mid])  # two steps below: the cascade's far end
    run = wf.defer()
    [handle] = q.claim_batch("w", 5)
    died: list[float] = []
    thread = _kill_later(handle, how, died)
    job = q.wait(run.job_ids[down], timeout=10)
    woke = time.monotonic()
    thread.join()
    assert job.status == "dead" and job.last_error == f"upstream job {handle.id} dead"
    assert woke - died[0] < WOKEN_WITHIN, woke - died[0]


def test_g2_a_buried_step_wakes_task_result_before_the_poll(qs: Any) -> None:
    store = qs.wrapped if isinstance(qs, SyncView) else qs
    report = Tasks(store).task(queue="g2-wake-task", opts=QueueOpts(max_attempts=1))(_report)
    wf = SyncWorkflow(qs, "wake-task")
    up = wf.add(report, x=1)
    down = wf.add(report, after=[up], x=2)
    run = wf.defer()
    [handle] = qs.queue("g2-wake-task").claim_batch("w", 5)
    died: list[float] = []
    thread = _kill_later(handle, "fail", died)

    def result() -> Any:  # task.result(), awaited on the async face
        got = report.result(run.job_ids[down], timeout=10)
        return qs._loop.run(got) if isinstance(qs, SyncView) else got

    with pytest.raises(JobDeadError) as info:
        result()
    woke = time.monotonic()
    thread.join()
    assert info.value.job.last_error == f"upstream job {handle.id} dead"
    assert woke - died[0] < WOKEN_WITHIN, woke - died[0]
