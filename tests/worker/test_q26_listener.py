"""Q26: the psycopg listener wakes the worker on every notification.

It reads its socket itself between liveness probes (a reader the loop calls
as data arrives), and psycopg reads it during a probe: a notification that
lands while the probe's ``SELECT 1`` is out must still wake the worker.
Probes run back to back here, and each job is enqueued alone, with no
re-poll to fall back on: one lost wake leaves its job unclaimed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import AsyncWorker, Job, Store, Worker
from alkstore_sa.worker import _listener

from .._workers import start_worker, wait_for

JOBS = 60


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_q26_a_notification_during_the_listeners_probe_still_wakes_it(
    database_url: URL, store: Store, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_listener, "LIVENESS_INTERVAL", 0.001)  # a probe every ms
    ran: list[int] = []
    seen = threading.Condition()

    def note(job: Job) -> None:
        with seen:
            ran.append(job.id)
            seen.notify_all()

    async def async_note(job: Job) -> None:
        note(job)

    def build(s: Any) -> Worker | AsyncWorker:
        if kind == "sync":
            return Worker({s.queue("probe"): note}, poll_interval=3600.0)
        return AsyncWorker({s.queue("probe"): async_note}, poll_interval=3600.0)

    running = start_worker(kind, database_url, build)
    try:
        wait_for(lambda: running.worker.health().listener_connected, timeout=10)
        queue = store.queue("probe")
        for _ in range(JOBS):
            job_id = queue.enqueue(b"x")
            with seen:
                assert seen.wait_for(lambda j=job_id: j in ran, timeout=5), (
                    f"job {job_id} was not woken for ({len(ran)} ran)"
                )
    finally:
        running.stop()
    assert len(ran) == JOBS
