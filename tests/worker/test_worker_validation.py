"""Workers refuse bad arguments when built, before any SQL (like Q3)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncWorker, InvalidNameError, Job, Store, Worker

# Engines connect lazily: nothing here reaches a server.
URL = "postgresql+psycopg://nobody@/nowhere?host=/nonexistent"


@pytest.fixture
def sq() -> Iterator[Any]:
    engine = create_engine(URL)
    yield Store(engine).queue("q")
    engine.dispose()


@pytest.fixture
def aq() -> Any:
    return AsyncStore(create_async_engine(URL)).queue("q")


def plain(job: Job) -> None: ...


def scoped(job: Job, session: Session) -> None: ...


async def aplain(job: Job) -> None: ...


async def ascoped(job: Job, session: Any) -> None: ...


def test_worker_accepts_plain_and_session_handlers(sq: Any) -> None:
    other = sq.store.queue("other")
    worker = Worker({sq: plain, other: scoped}, concurrency=2, poll_interval=0.5)
    assert [spec.wants_session for _, spec in worker._queues] == [False, True]
    assert worker.worker_id.count(":") == 2  # host:pid:uuid


def test_worker_id_is_overridable_and_checked(sq: Any) -> None:
    assert Worker({sq: plain}, worker_id="w-1").worker_id == "w-1"
    with pytest.raises(InvalidNameError):
        Worker({sq: plain}, worker_id="  ")


def test_o7_worker_queues_and_sweep_interval_are_as_given(sq: Any, aq: Any) -> None:
    other = sq.store.queue("other")
    assert Worker({sq: plain, other: plain}, sweep_interval=None).queues == (sq, other)
    assert AsyncWorker({aq: aplain}, sweep_interval=timedelta(minutes=5)).queues == (aq,)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"concurrency": 0}, ValueError),
        ({"concurrency": 1.5}, TypeError),
        ({"poll_interval": 0}, ValueError),
        ({"poll_interval": -1}, ValueError),
        ({"shutdown_timeout": -1}, ValueError),
        ({"job_timeout": 0}, ValueError),
        ({"job_timeout": "10"}, TypeError),
        ({"sweep_interval": 0}, ValueError),  # O7: None or > 0
        ({"sweep_interval": -5}, ValueError),
        ({"sweep_interval": "60"}, TypeError),
        ({"vacuum_interval": 0}, ValueError),  # None or > 0
        ({"vacuum_interval": "5"}, TypeError),
    ],
)
def test_worker_refuses_bad_settings(sq: Any, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        Worker({sq: plain}, **kwargs)


def test_worker_refuses_bad_handlers_and_queues(sq: Any, aq: Any) -> None:
    with pytest.raises(ValueError, match="at least one queue"):
        Worker({})
    with pytest.raises(TypeError, match="callable"):
        Worker({sq: "not a function"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"\(job\) or \(job, session\)"):
        Worker({sq: lambda a, b, c: None})
    with pytest.raises(TypeError, match="AsyncWorker"):
        Worker({sq: aplain})
    with pytest.raises(TypeError, match="Queue"):
        Worker({aq: plain})
    with pytest.raises(TypeError, match="Queue"):
        Worker({"q": plain})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="twice"):
        Worker({sq: plain, sq.store.queue("q"): plain})


def test_async_worker_takes_async_queues_and_async_session_handlers(sq: Any, aq: Any) -> None:
    other = aq.store.queue("other")
    worker = AsyncWorker({aq: aplain, other: ascoped})
    assert [(spec.is_async, spec.wants_session) for _, spec in worker._queues] == [
        (True, False),
        (True, True),
    ]
    AsyncWorker({aq: plain})  # a plain sync handler runs in a thread
    with pytest.raises(TypeError, match="must be async"):
        AsyncWorker({aq: scoped})
    with pytest.raises(TypeError, match="AsyncQueue"):
        AsyncWorker({sq: aplain})


def test_async_worker_says_how_to_fix_a_decorated_async_session_handler(aq: Any) -> None:
    import functools

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any) -> Any:  # a plain function returning the coroutine
            return fn(*args)

        return wrapper

    with pytest.raises(TypeError, match="must be async") as refused:
        AsyncWorker({aq: logged(ascoped)})
    assert "decorator" in str(refused.value) and "async def" in str(refused.value)


def test_worker_handler_shapes_are_read_from_signatures(sq: Any) -> None:
    import functools

    class Callable:
        def __call__(self, job: Job, session: Session) -> None: ...

    def with_default(job: Job, retries: int = 3) -> None: ...

    def two(job: Job, session: Session, extra: int) -> None: ...

    shapes: dict[str, Any] = {
        "default": with_default,
        "object": Callable(),
        "partial": functools.partial(two, extra=1),
        "varargs": lambda *args: None,
    }
    worker = Worker({sq.store.queue(k): fn for k, fn in shapes.items()})
    assert [spec.wants_session for _, spec in worker._queues] == [False, True, True, False]


def test_worker_runs_once(sq: Any) -> None:
    worker = Worker({sq: plain}, handle_signals=False)
    worker.stop()  # before run(): run() starts and returns at once
    worker.run()
    with pytest.raises(RuntimeError, match="runs once"):
        worker.run()
