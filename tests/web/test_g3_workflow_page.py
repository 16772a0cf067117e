"""G3 on the dashboard: a workflow's page lists its steps, states and edges, and
each step's job page links to it (and says what a waiting step waits on)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Store, Workflow

from .._web import web_client


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, engine: Engine, database_url: URL) -> Iterator[Any]:
    with web_client(request.param, engine, database_url) as c:
        yield c


def test_g3_workflow_page_and_links(client: Any, engine: Engine) -> None:
    store = Store(engine)
    q = store.queue("webwf")
    wf = Workflow(store, name="nightly <import>")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a])
    run = wf.defer()
    a_id, b_id = run.job_ids[a], run.job_ids[b]
    page = client.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    assert "nightly &lt;import&gt;" in page.text
    assert f'data-step="{a_id}"' in page.text and f'data-step="{b_id}"' in page.text
    assert "waiting" in page.text and "pending" in page.text
    assert f"/queues/webwf/jobs/{b_id}" in page.text
    job = client.get(f"/queues/webwf/jobs/{b_id}")  # a waiting step has a page too
    assert job.status_code == 200
    assert f"/workflows/{run.id}" in job.text and f"waiting on {a_id}" in job.text
    assert client.get("/workflows/999999").status_code == 404
