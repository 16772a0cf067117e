"""Must fail ``mypy --strict`` with exactly the errors marked ``# E:`` (rules/test_t1_typing.py)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncWorker, Store, Tasks, Worker

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


async def main() -> None:
    s: str = await asend.defer(order_id=1)  # E: assignment
    del s
