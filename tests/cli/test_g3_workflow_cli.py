"""``alkstore workflow ID`` (G3): counts and steps; a missing id is one line and exit 1."""

from __future__ import annotations

import json

from sqlalchemy import URL

from alkstore_sa import Store, Workflow

from .test_cli import alkstore


def test_g3_cli_shows_a_workflow_and_its_steps(database_url: URL, store: Store) -> None:
    q = store.queue("cliwf")
    wf = Workflow(store, name="import-42")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a])
    run = wf.defer()
    proc = alkstore("workflow", str(run.id), "--json", url=database_url)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert (shown["name"], shown["total"], shown["waiting"], shown["finished"]) == (
        "import-42",
        2,
        1,
        False,
    )
    assert shown["steps"] == [
        {"id": run.job_ids[a], "queue": "cliwf", "state": "pending", "after": []},
        {"id": run.job_ids[b], "queue": "cliwf", "state": "waiting", "after": [run.job_ids[a]]},
    ]
    text = alkstore("workflow", str(run.id), url=database_url)
    assert text.returncode == 0 and "'import-42' (running)" in text.stdout
    rows = [line.split() for line in text.stdout.splitlines()[1:]]
    assert [str(run.job_ids[b]), "cliwf", "waiting", str(run.job_ids[a])] in rows


def test_g3_cli_missing_workflow_is_one_line(database_url: URL) -> None:
    proc = alkstore("workflow", "999999", url=database_url)
    assert proc.returncode == 1
    assert (
        proc.stderr.strip() == "alkstore: no workflow 999999 in schema 'alkstore' (or it was swept)"
    )
    assert "Traceback" not in proc.stderr
    bad = alkstore("workflow", "x", url=database_url)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
