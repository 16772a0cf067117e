"""Must pass ``mypy --strict``: the typed uses of tasks (run by tests/rules/test_t1_typing.py)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from alkstore_sa import (
    AsyncStore,
    AsyncWorker,
    EnqueueOpts,
    Periodic,
    Step,
    Store,
    Tasks,
    Worker,
    Workflow,
    WorkflowRun,
)

store = Store.from_url("postgresql+psycopg://localhost/x")
astore = AsyncStore.from_url("postgresql+psycopg://localhost/x")
tasks = Tasks(store)
atasks = Tasks(astore)


@dataclass
class Address:
    street: str


@tasks.task(queue="receipts")
def send_receipt(order_id: int, note: str = "", to: Address | None = None) -> str:
    return f"{order_id}{note}"


@tasks.task(queue="receipts")
def charge(session: Session, order_id: int) -> None: ...


@atasks.task(queue="receipts")
async def asend(order_id: int) -> str:
    return str(order_id)


@atasks.task(queue="receipts")
async def acharge(session: AsyncSession, order_id: int) -> None: ...


job_id: int = send_receipt.defer(order_id=1)
job_id = send_receipt.defer(order_id=1, note="x", to=Address("main st"))
job_id = send_receipt.defer(order_id=1, opts=EnqueueOpts(delay=5))
ids: list[int] = send_receipt.defer_many([{"order_id": 1}, {"order_id": 2}])
text: str = send_receipt(order_id=3)
job_id = charge.defer(order_id=1)


def in_a_request(session: Session) -> None:
    # V6: the checked form inside a transaction.
    jid: int = send_receipt.configure(session=session).defer(order_id=1, note="x")
    jid = send_receipt.configure(session=session, opts=EnqueueOpts(delay=5)).defer(order_id=jid)
    jid = charge.configure(opts=EnqueueOpts(priority=1)).defer(order_id=jid)
    more: list[int] = send_receipt.configure(session=session).defer_many([{"order_id": jid}])
    del more


async def main(session: AsyncSession) -> None:
    n: int = await asend.defer(order_id=1)
    n = await acharge.defer(order_id=2)
    n = await asend.defer(order_id=1, session=session)
    n = await asend.configure(session=session).defer(order_id=n)
    n = await acharge.configure(session=session, opts=EnqueueOpts()).defer(order_id=n)
    _ = await asend.configure(opts=EnqueueOpts(delay=1)).defer_many([{"order_id": n}])
    many: list[int] = await asend.defer_many([{"order_id": 1}])
    got: str = await asend(order_id=n + len(many))
    del got


worker = Worker(tasks, periodic=[Periodic("nightly", "@daily", send_receipt, {"order_id": 1})])
aworker = AsyncWorker(atasks, concurrency=4)


# G1: workflows (a task step is checked like defer; defer's return by face).
wf = Workflow(store, name="import")
step_a: Step = wf.add(send_receipt, order_id=1)
step_b: Step = wf.add(send_receipt, after=[step_a], order_id=2)
step_c: Step = wf.add(send_receipt, opts=EnqueueOpts(priority=1), order_id=3)
step_d: Step = wf.add_job(store.queue("q"), b"", after=[step_b, step_c])
run: WorkflowRun = wf.defer()
job_id = run.job_ids[step_d]
arun: Awaitable[WorkflowRun] = Workflow(astore, name="import").defer()
