"""B1: the JSON logging recipe of docs/workers.md, run on a real worker's records.

The recipe is read from the document itself, so the document cannot drift
from what works.
"""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

from sqlalchemy import URL

from alkstore_sa import Job, QueueOpts, Store

from .._workers import start_worker, wait_for, worker_class

DOC = Path(__file__).resolve().parents[2] / "docs" / "workers.md"


def _recipe() -> str:
    logging_part = DOC.read_text().split("## Logging", 1)[1]
    match = re.search(r"```python\n(.*?)```", logging_part, re.S)
    assert match, "docs/workers.md: no python block in the Logging section"
    return match.group(1)


def test_b1_the_documented_json_formatter_renders_a_retry_with_its_fields(
    database_url: URL, store: Store
) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_recipe(), str(DOC), "exec"), namespace)  # adds its handler to alkstore_sa
    handler: logging.StreamHandler[Any] = namespace["handler"]
    stream = io.StringIO()
    handler.setStream(stream)
    try:

        def send(job: Job) -> None:
            raise TimeoutError("smtp timed out")

        opts = QueueOpts(retry_base=60)
        job_id = store.queue("emails", opts).enqueue(b"x")
        running = start_worker(
            "sync",
            database_url,
            lambda s: worker_class("sync")({s.queue("emails", opts): send}, poll_interval=0.05),
        )
        try:
            wait_for(lambda: "retried" in stream.getvalue())
        finally:
            running.stop()
    finally:
        root = logging.getLogger("alkstore_sa")
        root.removeHandler(handler)
        root.setLevel(logging.NOTSET)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (retry,) = [line for line in lines if line.get("alkstore_outcome") == "retried"]
    assert retry["level"] == "WARNING"
    assert retry["message"].startswith(f"job {job_id} on emails raised TimeoutError (attempt 1/5)")
    assert (retry["alkstore_queue"], retry["alkstore_job_id"], retry["alkstore_attempt"]) == (
        "emails",
        job_id,
        1,
    )
    assert retry["traceback"].startswith("Traceback (most recent call last):")
    assert any(line["message"].startswith("worker ") for line in lines)  # INFO start/stop too
