"""R1 on the dashboard: jobs kept after their ack are listed as completed, and a
completed job's page shows when it finished and its result (the first 64 KiB),
with no action that would make no sense for it (cancel, requeue)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import EnqueueOpts, QueueOpts, Store

from .._web import web_client


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def _completed(store: Store, queue: str, result: bytes | None) -> int:
    q = store.queue(queue, QueueOpts(keep_completed=3600))
    job_id = q.enqueue(b"payload of a kept job")
    handle = q.claim_one("w")
    assert handle is not None and handle.id == job_id
    assert handle.ack(result=result)
    return job_id


def test_r1_dashboard_lists_completed_jobs_and_a_queue_with_only_those_is_known(
    client: Any, store: Store
) -> None:
    job_id = _completed(store, "kept", b"ok")
    assert client.get("/queues/kept").status_code == 200  # no live row, yet not a 404
    listing = client.get("/queues/kept/jobs?status=completed")
    assert listing.status_code == 200
    row = listing.text.split(f'data-job-id="{job_id}"')[1].split("</tr>")[0]
    assert '<span class="badge completed">completed</span>' in row
    assert "finished" in row
    assert "/cancel" not in row  # nothing to cancel: it ran


def test_r1_dashboard_job_page_shows_the_result_and_when_it_finished(
    client: Any, store: Store
) -> None:
    job_id = _completed(store, "kept", b"the <result> " + b"r" * 70_000)
    page = client.get(f"/queues/kept/jobs/{job_id}")
    assert page.status_code == 200
    fields = page.text.split('class="fields"')[1].split("</table>")[0]
    assert "<th>Finished</th>" in fields and "<th>Died</th>" not in fields
    result = page.text.split("<h2>Result")[1].split("</section>")[0]
    assert "70,013 bytes, first 65,536 shown" in result
    assert "the &lt;result&gt; rrr" in result  # escaped like every text
    assert "/cancel" not in page.text and "/requeue" not in page.text


def test_r1_dashboard_job_page_of_a_completed_job_without_a_result(
    client: Any, store: Store
) -> None:
    job_id = _completed(store, "kept", None)
    page = client.get(f"/queues/kept/jobs/{job_id}")
    assert page.status_code == 200
    assert "none kept" in page.text.split("<h2>Result")[1].split("</h2>")[0]


def test_r1_dashboard_live_job_page_has_no_result_section(client: Any, store: Store) -> None:
    job_id = store.queue("live").enqueue(b"x", EnqueueOpts(keep_completed=60))
    page = client.get(f"/queues/live/jobs/{job_id}")
    assert page.status_code == 200
    assert "<h2>Result" not in page.text and "<th>Died</th>" in page.text
