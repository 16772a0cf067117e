"""V6: task arguments are checked against the function's annotations at defer.

A mismatch is a ``TypeError`` naming the parameter, before any SQL, on every
way to defer: ``defer``, ``defer`` with ``session=``/``opts=``, ``defer_many``,
``configure(session=, opts=).defer``/``.defer_many``, sync and async (both
drivers).  The static side (mypy) is tests/typing/tasks_bad.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Optional

import pytest
from sqlalchemy import URL, Engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, EnqueueOpts, Store, Tasks
from alkstore_sa.tasks import decode_envelope
from alkstore_sa.tasks._typecheck import check

from .._drivers import ASYNC_FACES, async_url
from .._sqlspy import SqlSpy


@dataclass
class Address:
    street: str


@dataclass
class Other:
    street: str


def charge_card(order_id: int, amount_cents: int) -> str:
    return f"charged {amount_cents} cents for order {order_id}"


def rich(
    n: int,
    ratio: float,
    name: str,
    flag: bool,
    nothing: None,
    tags: list[str],
    scores: dict[str, float],
    maybe: Optional[int],  # noqa: UP045 -- the spelling is what is tested
    either: int | str,
    mode: Literal["fast", "slow"],
    to: Address | None = None,
    anything: Any = None,
    loose: object = None,
) -> None: ...


GOOD: dict[str, Any] = {
    "n": 1,
    "ratio": 2,  # an int is a float
    "name": "x",
    "flag": True,
    "nothing": None,
    "tags": ["a", "b"],
    "scores": {"a": 1.5, "b": 2},
    "maybe": None,
    "either": "s",
    "mode": "fast",
    "to": Address("main st"),
    "anything": {"k": [1, None]},
}

BAD = [
    ("n", "abc", "argument 'n': expected int, got str"),
    ("n", True, "argument 'n': expected int, got bool"),
    ("n", 1.5, "argument 'n': expected int, got float"),
    ("ratio", "1", "argument 'ratio': expected float, got str"),
    ("name", 5, "argument 'name': expected str, got int"),
    ("flag", 1, "argument 'flag': expected bool, got int"),
    ("nothing", 0, "argument 'nothing': expected None, got int"),
    ("tags", "ab", "argument 'tags': expected list\\[str\\], got str"),
    ("tags", ["a", 2], "argument 'tags'\\[1\\]: expected str, got int"),
    ("scores", {"a": "x"}, "argument 'scores'\\['a'\\]: expected float, got str"),
    ("scores", [1.0], "argument 'scores': expected dict\\[str, float\\], got list"),
    ("maybe", "1", "argument 'maybe': expected Optional\\[int\\], got str"),
    ("either", 1.5, "argument 'either': expected int \\| str, got float"),
    ("mode", "medium", "argument 'mode': expected Literal\\['fast', 'slow'\\], got str"),
    ("to", Other("x"), "argument 'to': expected .*Address.*, got Other"),
]


@pytest.fixture
def spy(engine: Engine) -> Iterator[SqlSpy]:
    s = SqlSpy(engine)
    yield s
    s.close()


def _ways(task: Any, session: Session) -> list[Callable[[dict[str, Any]], object]]:
    """Every way to defer on a Store."""
    return [
        lambda kw: task.defer(**kw),
        lambda kw: task.defer(**kw, session=session),
        lambda kw: task.defer(**kw, opts=EnqueueOpts(delay=1)),
        lambda kw: task.defer_many([GOOD, kw]),
        lambda kw: task.configure(session=session).defer(**kw),
        lambda kw: task.configure(opts=EnqueueOpts(priority=1)).defer(**kw),
        lambda kw: task.configure(session=session, opts=EnqueueOpts()).defer_many([kw]),
    ]


@pytest.mark.parametrize(("param", "value", "match"), BAD)
def test_v6_wrong_type_is_a_type_error_naming_the_parameter_before_sql(
    store: Store, engine: Engine, spy: SqlSpy, param: str, value: object, match: str
) -> None:
    task = Tasks(store).task(queue="v6")(rich)
    with Session(engine) as session:
        for way in _ways(task, session):
            with spy.no_sql(), pytest.raises(TypeError, match=match):
                way({**GOOD, param: value})
    assert store.queue("v6").stats().due == 0


def test_v6_the_issues_wrong_type_defer_is_refused(store: Store, engine: Engine) -> None:
    """`charge_card.defer(order_id="abc", amount_cents=1)` was enqueued and ran."""
    charge = Tasks(store).task(queue="payments")(charge_card)
    with pytest.raises(TypeError, match=r"task .*charge_card.*: argument 'order_id': expected int"):
        charge.defer(order_id="abc", amount_cents=1)
    with Session(engine) as session, pytest.raises(TypeError, match="'order_id'"):
        charge.defer(order_id="abc", amount_cents=1, session=session)
    with pytest.raises(TypeError, match="keyword arguments only"):
        charge.configure().defer(1, 2)  # type: ignore[arg-type,call-arg]
    assert store.queue("payments").stats().due == 0


def test_v6_matching_arguments_defer_on_every_way(store: Store, engine: Engine) -> None:
    task = Tasks(store).task(queue="v6")(rich)
    with Session(engine) as session:
        for way in _ways(task, session):
            way(dict(GOOD))
        session.commit()
    ids = [j.id for j in store.queue("v6").jobs(limit=100)]
    assert len(ids) == 8  # seven ways, one of them a defer_many of two
    _, kwargs = decode_envelope(store.queue("v6").get_job(ids[0]).payload)  # type: ignore[union-attr]
    assert kwargs["to"] == {"street": "main st"} and kwargs["ratio"] == 2


def test_v6_configure_binds_session_and_opts(store: Store, engine: Engine) -> None:
    charge = Tasks(store).task(queue="payments")(charge_card)
    with Session(engine) as session:
        bound = charge.configure(session=session, opts=EnqueueOpts(priority=7))
        job_id = bound.defer(order_id=1, amount_cents=5)
        bound.defer_many([{"order_id": 2, "amount_cents": 6}])
        session.rollback()  # both went with the caller's transaction
    assert store.queue("payments").get_job(job_id) is None
    job_id = charge.configure(opts=EnqueueOpts(priority=7)).defer(order_id=3, amount_cents=1)
    job = store.queue("payments").get_job(job_id)
    assert job is not None and job.priority == 7
    with pytest.raises(TypeError, match="opts must be EnqueueOpts"):
        charge.configure(opts={"priority": 1})  # type: ignore[arg-type]


def test_v6_pydantic_models_are_checked(store: Store) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Customer(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str

    def greet(who: Customer) -> None: ...

    greet.__annotations__["who"] = Customer
    task = Tasks(store).task(queue="v6")(greet)
    task.defer(who=Customer(name="a"))
    with pytest.raises(TypeError, match="argument 'who': expected Customer, got dict"):
        task.defer(who={"name": "a"})


def test_v6_unchecked_hints_are_left_to_the_encoding() -> None:
    check(object(), "SomeForwardRef", "x")  # not a hint this checks: nothing to say
    with pytest.raises(TypeError, match="x: expected 2 items, got 1"):
        check([1], tuple[int, str], "x")
    check((1, "a"), tuple[int, str], "x")


@pytest.mark.parametrize("face", ASYNC_FACES)
def test_v6_async_defer_checks_types_before_sql(database_url: URL, face: str) -> None:
    async def main() -> None:
        engine = create_async_engine(async_url(database_url, face))
        astore = AsyncStore(engine)
        charge = Tasks(astore).task(queue="payments")(_acharge)
        try:
            with pytest.raises(TypeError, match="argument 'order_id': expected int, got str"):
                await charge.defer(order_id="abc", amount_cents=1)
            async with engine.connect() as conn:
                with pytest.raises(TypeError, match="'amount_cents': expected int, got float"):
                    await charge.configure(session=conn).defer(order_id=1, amount_cents=1.5)
                with pytest.raises(TypeError, match=r"item 0: .*'order_id'"):
                    await charge.configure(session=conn).defer_many(
                        [{"order_id": "x", "amount_cents": 1}]
                    )
                with pytest.raises(TypeError, match="'order_id'"):
                    await charge.defer(order_id=None, amount_cents=1, opts=EnqueueOpts())
            job_id = await charge.configure(opts=EnqueueOpts()).defer(order_id=1, amount_cents=2)
            assert await astore.queue("payments").get_job(job_id) is not None
            async with engine.connect() as conn:
                rows = await conn.execute(text("SELECT count(*) FROM alkstore.jobs"))
                assert rows.scalar_one() == 1  # only the good one
        finally:
            await astore.close()
            await engine.dispose()

    asyncio.run(main())


async def _acharge(order_id: int, amount_cents: int) -> str:
    return charge_card(order_id, amount_cents)
