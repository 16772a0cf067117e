"""Must fail ``mypy --strict`` with exactly the errors marked ``# E:``.

Run by tests/rules/test_t1_typing.py.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from alkstore_sa import (
    AsyncStore,
    AsyncWorker,
    EnqueueOpts,
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


@tasks.task(queue="receipts")
def send_receipt(order_id: int) -> None: ...


@tasks.task(queue="receipts")
def charge(session: Session, order_id: int) -> None: ...


@atasks.task(queue="receipts")
async def asend(order_id: int) -> None: ...


send_receipt.defer(order_id="x")  # E: call-overload
send_receipt.defer(orderid=1)  # E: call-overload
send_receipt.defer()  # E: call-overload
charge.defer(order_id="x")  # E: call-overload
job_id: int = asend.defer(order_id=1)  # E: assignment
send_receipt(order_id="x")  # E: arg-type
Worker(atasks)  # E: arg-type
AsyncWorker(tasks)  # E: arg-type
send_receipt.defer(1)  # E: call-overload


def in_a_request(session: Session) -> None:
    # V6: the charge_card.defer(order_id="abc", ...) inside a request, checked.
    send_receipt.configure(session=session).defer(order_id="abc")  # E: arg-type
    send_receipt.configure(session=session, opts=EnqueueOpts()).defer()  # E: call-arg
    send_receipt.configure(session=session).defer(1)  # E: arg-type call-arg
    send_receipt.configure(session=session).defer(orderid=1)  # E: call-arg
    charge.configure(opts=EnqueueOpts()).defer(order_id="x")  # E: arg-type


async def main(session: AsyncSession) -> None:
    s: str = await asend.defer(order_id=1)  # E: assignment
    del s
    await asend.defer(1)  # E: call-overload
    await asend.configure(session=session).defer(1)  # E: arg-type call-arg
    await asend.configure(session=session).defer(order_id="x")  # E: arg-type


# G1: workflows.
wf = Workflow(store, name="import")
wf.add(send_receipt, order_id="x")  # E: call-overload
wf.add(send_receipt, orderid=1)  # E: call-overload
wf.add(send_receipt, 1)  # E: call-overload
wf.add_job(store.queue("q"), "text")  # E: arg-type
wf_run: WorkflowRun = Workflow(astore, name="a").defer()  # E: assignment
Workflow(store)  # E: call-overload
