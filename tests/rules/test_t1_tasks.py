"""T1: tasks -- functions deferred as a versioned JSON envelope, checked before any SQL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncTask, EnqueueOpts, QueueOpts, Store, Task, Tasks
from alkstore_sa.tasks import SessionTask, decode_envelope

from .._sqlspy import SqlSpy


@dataclass
class Address:
    street: str
    city: str


@dataclass
class Order:
    id: int
    ship_to: Address
    notes: list[str]


def send_receipt(order_id: int, note: str = "") -> str:
    return f"receipt {order_id}{note}"


def _rows(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM alkstore.jobs")).scalar_one())


def test_t1_defer_writes_the_documented_envelope(store: Store) -> None:
    tasks = Tasks(store)
    task = tasks.task(queue="receipts")(send_receipt)
    assert isinstance(task, Task)
    job_id = task.defer(order_id=42, note="!")
    job = store.queue("receipts").get_job(job_id)
    assert job is not None and job.queue == "receipts"
    name = f"{__name__}.send_receipt"
    assert json.loads(job.payload) == {
        "v": 1,
        "task": name,
        "kwargs": {"order_id": 42, "note": "!"},
    }
    assert decode_envelope(job.payload) == (name, {"order_id": 42, "note": "!"})


def test_t1_calling_the_task_calls_the_function(store: Store) -> None:
    task = Tasks(store).task(queue="receipts", name="receipt")(send_receipt)
    assert task(order_id=7) == "receipt 7"
    assert task.name == "receipt" and _rows(store) == 0


def test_t1_defer_takes_opts_and_session(store: Store) -> None:
    task = Tasks(store).task(queue="receipts", opts=QueueOpts(priority=3, max_attempts=2))(
        send_receipt
    )
    at = datetime.now(UTC) + timedelta(hours=1)
    job_id = task.defer(order_id=1, opts=EnqueueOpts(run_at=at, max_attempts=4))
    job = task.queue.get_job(job_id)
    assert job is not None
    assert (job.priority, job.max_attempts, job.run_at) == (3, 4, at)
    with Session(store.engine) as session:
        task.defer(order_id=2, session=session)
        session.rollback()  # Q6: it went with the caller's transaction
    assert _rows(store) == 1
    with Session(store.engine) as session, session.begin():
        task.defer(order_id=3, session=session)
    assert _rows(store) == 2


def test_t1_defer_many_in_order(store: Store) -> None:
    task = Tasks(store).task(queue="receipts")(send_receipt)
    ids = task.defer_many([{"order_id": i} for i in range(5)])
    assert ids == sorted(ids) and len(ids) == 5
    payloads = [task.queue.get_job(i).payload for i in ids]  # type: ignore[union-attr]
    assert [json.loads(p)["kwargs"]["order_id"] for p in payloads] == list(range(5))
    with pytest.raises(TypeError, match="item 1"):
        task.defer_many([{"order_id": 1}, {"order_id": object()}])
    with pytest.raises(TypeError, match="list of kwargs dicts"):
        task.defer_many({"order_id": 1})  # type: ignore[arg-type]
    assert _rows(store) == 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"order_id": 1, "nope": 2}, "unexpected keyword argument 'nope'"),
        ({}, "missing a required argument: 'order_id'"),
        ({"order_id": datetime.now(UTC)}, "datetime cannot be encoded"),
        ({"order_id": {1: "x"}}, "dict keys must be str"),
        ({"order_id": float("nan")}, "cannot be encoded as JSON"),
        ({"order_id": b"raw"}, "bytes cannot be encoded"),
        ({"order_id": Address("a", "b")}, "Address cannot be encoded"),
    ],
)
def test_t1_bad_arguments_raise_type_error_before_any_sql(
    engine: Engine, store: Store, kwargs: dict[str, Any], match: str
) -> None:
    task = Tasks(store).task(queue="receipts")(send_receipt)
    spy = SqlSpy(engine)
    try:
        with spy.no_sql(), pytest.raises(TypeError, match=match):
            task.defer(**kwargs)
    finally:
        spy.close()


def test_t1_positional_defer_is_refused(store: Store) -> None:
    task = Tasks(store).task(queue="receipts")(send_receipt)
    with pytest.raises(TypeError, match="keyword arguments only"):
        task.defer(1)


def test_t1_queues_must_agree_on_queue_opts(store: Store) -> None:
    tasks = Tasks(store)
    tasks.task(queue="receipts", opts=QueueOpts(max_attempts=3), name="a")(send_receipt)
    tasks.task(queue="receipts", opts=QueueOpts(max_attempts=3), name="b")(send_receipt)
    with pytest.raises(ValueError, match="must agree on its QueueOpts"):
        tasks.task(queue="receipts", name="c")(send_receipt)
    with pytest.raises(ValueError, match="registered twice"):
        tasks.task(queue="other", opts=None, name="a")(send_receipt)
    with pytest.raises(ValueError, match="reserved"):
        tasks.task(queue="pg_nope")
    assert [t.name for t in tasks] == ["a", "b"]


def test_t1_positional_only_parameters_are_refused_at_registration(store: Store) -> None:
    def positional(order_id: int, /) -> None: ...

    with pytest.raises(TypeError, match="positional-only"):
        Tasks(store).task(queue="receipts")(positional)


def ship(order: Order, backup: Address | None = None) -> tuple[Order, Address | None]:
    return order, backup


def test_t1_dataclass_arguments_are_encoded_and_rebuilt(store: Store) -> None:
    task = Tasks(store).task(queue="orders")(ship)
    order = Order(7, Address("Main St 1", "Riga"), ["fragile"])
    job_id = task.defer(order=order, backup=None)
    payload = task.queue.get_job(job_id).payload  # type: ignore[union-attr]
    _, kwargs = decode_envelope(payload)
    assert kwargs == {
        "order": {
            "id": 7,
            "ship_to": {"street": "Main St 1", "city": "Riga"},
            "notes": ["fragile"],
        },
        "backup": None,
    }
    rebuilt = task.signature.load(kwargs, "t")
    assert rebuilt == {"order": order, "backup": None}
    assert isinstance(rebuilt["order"].ship_to, Address)
    with pytest.raises(TypeError, match="expected Order, got dict"):
        task.defer(order={"id": 1})


def test_t1_pydantic_models_are_encoded_and_rebuilt(store: Store) -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is optional; not installed here")

    class Customer(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        vip: bool = False

    def greet(customer: Customer) -> str:
        return customer.name

    greet.__annotations__["customer"] = Customer  # a local class: no forward reference
    task = Tasks(store).task(queue="greetings")(greet)
    job_id = task.defer(customer=Customer(name="Ann", vip=True))
    _, kwargs = decode_envelope(task.queue.get_job(job_id).payload)  # type: ignore[union-attr]
    assert kwargs == {"customer": {"name": "Ann", "vip": True}}
    rebuilt = task.signature.load(kwargs, "t")["customer"]
    assert isinstance(rebuilt, Customer) and rebuilt == Customer(name="Ann", vip=True)


def test_t1_session_scoped_task_does_not_defer_its_session(store: Store) -> None:
    def charge(session: Session, order_id: int) -> None: ...

    task = Tasks(store).task(queue="charges")(charge)
    assert isinstance(task, SessionTask) and task.takes_session
    task.defer(order_id=1)
    task.defer(order_id=2, session=None)  # session= is the enqueue's transaction
    with pytest.raises(TypeError, match="'session' is given by the worker"):
        task.payload({"order_id": 1, "session": 1})


def test_t1_tasks_takes_a_store() -> None:
    with pytest.raises(TypeError, match="Store or AsyncStore"):
        Tasks("postgresql://")  # type: ignore[type-var]


async def test_t1_async_store_defer_is_a_coroutine(async_engine: AsyncEngine) -> None:
    astore = AsyncStore(async_engine)
    tasks = Tasks(astore)

    @tasks.task(queue="receipts", name="receipt")
    async def send(order_id: int) -> int:
        return order_id

    assert isinstance(send, AsyncTask)
    job_id = await send.defer(order_id=5)
    ids = await send.defer_many([{"order_id": 6}, {"order_id": 7}])
    job = await send.queue.get_job(job_id)
    assert job is not None and json.loads(job.payload) == {
        "v": 1,
        "task": "receipt",
        "kwargs": {"order_id": 5},
    }
    assert len(ids) == 2
    assert await send(order_id=9) == 9
    with pytest.raises(TypeError, match="missing a required argument"):
        await send.defer()
    await astore.close()
