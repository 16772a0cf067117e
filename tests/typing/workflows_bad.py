"""Must fail ``mypy --strict`` with exactly the errors marked ``# E:``.

Run by tests/rules/test_g1_typing.py.
"""

from __future__ import annotations

from alkstore_sa import AsyncStore, Store, Tasks, Workflow, WorkflowRun

store = Store.from_url("postgresql+psycopg://localhost/x")
astore = AsyncStore.from_url("postgresql+psycopg://localhost/x")
tasks = Tasks(store)


@tasks.task(queue="imports")
def fetch(url: str) -> None: ...


wf = Workflow(store, name="import")
wf.add(fetch, url=1)  # E: call-overload
wf.add(fetch, uri="u")  # E: call-overload
wf.add(fetch, "u")  # E: call-overload
wf.add_job(store.queue("q"), "text")  # E: arg-type
run: WorkflowRun = Workflow(astore, name="a").defer()  # E: assignment
Workflow(store)  # E: call-overload
