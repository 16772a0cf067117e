"""P1 end to end across a real minute boundary (slow: up to about a minute).

Marked ``minute`` so it can be found (``pytest -m minute``) or left out
(``pytest -m "not minute"``).  A five-field ``* * * * *`` schedule on a
worker that also runs the target task: the job made at the boundary is
claimed and run, with its arguments, and its run_at was the boundary.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import URL, Engine, text

from alkstore_sa import Periodic, Store, Tasks, Worker

from .._workers import start_worker, wait_for


@pytest.mark.minute
@pytest.mark.timeout(150)
def test_p1_minutely_schedule_fires_at_the_real_minute_boundary(
    database_url: URL, engine: Engine
) -> None:
    ran: list[tuple[str, datetime]] = []
    lock = threading.Lock()

    def build(store: Store) -> Worker:
        tasks = Tasks(store)

        @tasks.task(queue="minutely", name="stamp")
        def stamp(label: str) -> None:
            with lock:
                ran.append((label, datetime.now(UTC)))

        every_minute = Periodic("every-minute", "* * * * *", stamp, {"label": "tick"})
        return Worker(tasks, periodic=[every_minute], poll_interval=0.5)

    started = datetime.now(UTC)
    boundary = started.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if boundary - started < timedelta(seconds=3):
        # Too close: the worker's first look (which starts a new schedule at
        # its next slot) could land after this boundary.  Take the next one.
        time.sleep((boundary - started).total_seconds() + 0.1)
        boundary += timedelta(minutes=1)
    running = start_worker("sync", database_url, build)
    try:
        wait_for(lambda: ran, timeout=75)
    finally:
        running.stop()
    (label, at), *_ = ran
    assert label == "tick"
    assert boundary <= at < boundary + timedelta(seconds=15)
    with engine.connect() as conn:
        last: Any = conn.execute(
            text("SELECT last_slot FROM alkstore.periodic WHERE name = 'every-minute'")
        ).scalar_one()
    # The schedule was new: the minute the worker started in was not enqueued;
    # the slot it fired is the boundary (the job's run_at).
    assert last == boundary
    assert len(ran) == 1
