"""V2: the dashboard's sharper pages -- error groups by exception type and folded
message, every queue with rows, a pause or recent throughput listed, a job's
unique key and task name, task names in lists, 404 for what is not there.

The dead letters of the grouping test come from a real Worker whose handler
raises, so the exception type is the one its traceback names.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import URL, Engine, text

from alkstore_sa import EnqueueOpts, Job, QueueOpts, Store, Tasks, Worker

from .._web import web_client


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


class PaymentGatewayError(Exception):
    pass


def _charge(job: Job) -> None:
    order = job.payload.decode()
    if order.startswith("u"):
        raise KeyError(f"no customer {uuid.uuid4()} for order {order[1:]}")
    raise PaymentGatewayError(f"payment gateway unreachable (order {order})")


def _run_until_dead(store: Store, queue: str, n: int) -> None:
    q = store.queue(queue, QueueOpts(max_attempts=1))
    worker = Worker({q: _charge}, concurrency=2, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while q.stats().dead < n:
            assert time.monotonic() < deadline, q.stats()
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(30)


def _groups(page: str) -> list[str]:
    body = page.split('class="grid groups"')[1].split("</tbody>")[0]
    return [row.split("</tr>")[0] for row in body.split("<tr>")[2:]]


def test_v2_error_groups_by_exception_type_and_folded_message(client: Any, store: Store) -> None:
    q = store.queue("pay", QueueOpts(max_attempts=1))
    q.enqueue_many([str(i).encode() for i in (6, 7, 8, 9)] + [b"u1", b"u22"])
    _run_until_dead(store, "pay", 6)
    page = client.get("/queues/pay/dead")
    assert page.status_code == 200
    groups = _groups(page.text)
    assert len(groups) == 2, groups  # not six groups of one
    top, second = groups
    assert "PaymentGatewayError" in top and "payment gateway unreachable (order N)" in top
    assert '<td class="num">4</td>' in top
    assert "KeyError" in second and "no customer ID for order N" in second
    assert '<td class="num">2</td>' in second
    # The group's link lists exactly its four jobs.
    link = top.split('<a href="')[1].split('"')[0].replace("&amp;", "&")
    listed = client.get(link)
    assert listed.status_code == 200
    assert listed.text.count("data-job-id=") == 4
    assert "payment gateway unreachable (order 7)" in listed.text
    # And "requeue all" of that group moves those four, not the KeyErrors.
    from .._web import post

    r = post(
        client,
        "/queues/pay/requeue",
        {
            "all": "1",
            "error": "payment gateway unreachable (order N)",
            "type": link.split("type=")[1],
        },
        headers={"X-Alkstore-Live": "1"},
    )
    assert r.text == "requeued 4 job(s)", r.text
    assert q.stats().dead == 2


def test_v2_every_queue_with_rows_a_pause_or_recent_throughput_is_listed(
    client: Any, store: Store, engine: Engine
) -> None:
    store.queue("has-rows").enqueue(b"x")
    store.queue("only-paused").pause()
    with engine.begin() as conn:  # what a Worker's tallies leave once its queue is empty
        conn.execute(
            text(
                "INSERT INTO alkstore.throughput (queue, minute, acked, retried, dead) "
                "VALUES ('drained', date_trunc('minute', now()), 5, 0, 0), "
                "('long-ago', date_trunc('minute', now()) - interval '90 minutes', 5, 0, 0)"
            )
        )
    page = client.get("/")
    for name in ("has-rows", "only-paused", "drained"):
        assert f'data-queue="{name}"' in page.text, name
    assert 'data-queue="long-ago"' not in page.text  # nothing in the last hour
    assert client.get("/queues/drained").status_code == 200
    assert client.get("/queues/only-paused").status_code == 200
    assert client.get("/queues/long-ago").status_code == 404


def test_v2_job_page_shows_unique_key_and_task_name_and_lists_show_task_names(
    client: Any, store: Store
) -> None:
    def send_receipt(order_id: int, note: str) -> None:
        pass

    task = Tasks(store).task(queue="receipts", name="send_receipt")(send_receipt)
    job_id = task.defer(order_id=42, note="n" * 500, opts=EnqueueOpts(unique_key="order-42"))
    plain = store.queue("receipts").enqueue(b"not an envelope")
    page = client.get(f"/queues/receipts/jobs/{job_id}")
    assert page.status_code == 200
    fields = page.text.split('class="fields"')[1].split("</table>")[0]
    assert "<th>Unique key</th><td><code>order-42</code>" in fields
    assert f"<th>Task</th><td><code>{task.name}</code>" in fields
    other = client.get(f"/queues/receipts/jobs/{plain}").text
    assert "not a task envelope" in other
    listing = client.get("/queues/receipts").text
    row = listing.split(f'data-job-id="{job_id}"')[1].split("</tr>")[0]
    assert f"<code>{task.name}</code>" in row and "&#34;kwargs&#34;" not in row
    plain_row = listing.split(f'data-job-id="{plain}"')[1].split("</tr>")[0]
    assert "not an envelope" in plain_row


def test_v2_unknown_queue_or_job_or_malformed_path_is_404(client: Any, store: Store) -> None:
    job = store.queue("payments").enqueue(b"x")
    assert client.get("/queues/payments").status_code == 200
    assert client.get(f"/queues/payments/jobs/{job}").status_code == 200
    for path in (
        "/queues/nosuch",
        "/queues/nosuch/jobs",
        "/queues/nosuch/dead",
        f"/queues/nosuch/jobs/{job}",
        "/queues/payments/jobs/abc",
        "/queues/payments/jobs/999999999",
        f"/queues/payments/jobs/{job}/x",
        "/queues/payments/dead/x",
        "/queues/" + quote("pg_reserved", safe=""),
        "/queues/",
        "/nothing-here",
    ):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code, r.text[:200])
        assert "Traceback" not in r.text


def test_v2_job_page_shows_the_group(client: Any, store: Store) -> None:
    grouped = store.queue("tenants").enqueue(b"x", EnqueueOpts(group="tenant-<7>"))
    plain = store.queue("tenants").enqueue(b"y")
    fields = client.get(f"/queues/tenants/jobs/{grouped}").text.split('class="fields"')[1]
    assert "<th>Group</th><td><code>tenant-&lt;7&gt;</code>" in fields
    other = client.get(f"/queues/tenants/jobs/{plain}").text.split('class="fields"')[1]
    assert '<th>Group</th><td><span class="muted">none</span>' in other
