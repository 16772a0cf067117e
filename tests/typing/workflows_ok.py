"""Must pass ``mypy --strict``: workflows' static types (G1). Run by test_g1_typing.py."""

from __future__ import annotations

from collections.abc import Awaitable

from alkstore_sa import AsyncStore, EnqueueOpts, Step, Store, Tasks, Workflow, WorkflowRun

store = Store.from_url("postgresql+psycopg://localhost/x")
astore = AsyncStore.from_url("postgresql+psycopg://localhost/x")
tasks = Tasks(store)


@tasks.task(queue="imports")
def fetch(url: str) -> None: ...


wf = Workflow(store, name="import")
a: Step = wf.add(fetch, url="u")
b: Step = wf.add(fetch, after=[a], url="v")
c: Step = wf.add(fetch, opts=EnqueueOpts(priority=1), url="w")
d: Step = wf.add_job(store.queue("q"), b"", after=[b, c])
run: WorkflowRun = wf.defer()
job_id: int = run.job_ids[d]

awf = Workflow(astore, name="import")
arun: Awaitable[WorkflowRun] = awf.defer()
