"""The public surface is exactly ``__all__``, and each async twin matches its sync class."""

from __future__ import annotations

import inspect
import types

import pytest

import alkstore_sa
from alkstore_sa import (
    AsyncJobHandle,
    AsyncQueue,
    AsyncStore,
    JobHandle,
    Queue,
    Store,
)

CONTRACT_NAMES = {
    "Store",
    "AsyncStore",
    "QueueOpts",
    "EnqueueOpts",
    "Job",
    "JobHandle",
    "AsyncJobHandle",
    "SweepResult",
    "QueueStats",
    "Worker",
    "AsyncWorker",
    "FailJob",
    "RetryJob",
    "AlkstoreError",
    "InvalidNameError",
    "StoreClosedError",
    "HandleSpentError",
    # Part 2, T1: the registry and its task types.
    "Tasks",
    "Task",
    "AsyncTask",
    # P1
    "Periodic",
    # V1
    "WorkerInfo",
    # Part 3: Z1, R3
    "SnoozeJob",
    "JobDeadError",
    # X1: N worker processes under one supervisor, and its start failure.
    "run_processes",
    # F1: flow control's values.
    "Limits",
    "Rate",
    "WorkerStartError",
    # C1: a sync handler asks whether its job was cancelled.
    "job_cancelled",
    # G1-G3: workflows.
    "Workflow",
    "Step",
    "WorkflowRun",
    "WorkflowStatus",
}


def _public_attributes(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_all_is_exactly_the_public_surface() -> None:
    # The names load on first use (V3: a light `import alkstore_sa`): load them all.
    for name in alkstore_sa.__all__:
        getattr(alkstore_sa, name)
    assert set(dir(alkstore_sa)) >= set(alkstore_sa.__all__)
    with pytest.raises(AttributeError):
        alkstore_sa.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    assert set(alkstore_sa.__all__) == _public_attributes(alkstore_sa)
    assert len(alkstore_sa.__all__) == len(set(alkstore_sa.__all__))


def test_all_has_every_name_the_spec_promises() -> None:
    assert set(alkstore_sa.__all__) >= CONTRACT_NAMES


def test_package_is_typed() -> None:
    from importlib.resources import files

    assert files("alkstore_sa").joinpath("py.typed").is_file()


def _members(cls: type) -> dict[str, object]:
    return {
        name: value
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") or name in ("__aenter__", "__aexit__")
    }


# Methods that differ between faces by design: sync context manager vs async one.
_FACE_ONLY = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


@pytest.mark.parametrize(
    ("sync_cls", "async_cls"),
    [(Store, AsyncStore), (Queue, AsyncQueue), (JobHandle, AsyncJobHandle)],
)
def test_async_twin_has_same_public_names(sync_cls: type, async_cls: type) -> None:
    sync_names = set(_members(sync_cls)) - _FACE_ONLY
    async_names = set(_members(async_cls)) - _FACE_ONLY
    assert sync_names == async_names


@pytest.mark.parametrize(
    ("sync_cls", "async_cls"),
    [(Store, AsyncStore), (Queue, AsyncQueue), (JobHandle, AsyncJobHandle)],
)
def test_async_twin_methods_take_same_parameters(sync_cls: type, async_cls: type) -> None:
    for name, sync_member in _members(sync_cls).items():
        if name in _FACE_ONLY or not callable(sync_member) or isinstance(sync_member, type):
            continue
        async_member = getattr(async_cls, name)
        sync_params = list(inspect.signature(sync_member).parameters.values())
        async_params = list(inspect.signature(async_member).parameters.values())
        # The first parameter (self/cls or the engine) differs only in its annotation.
        strip = [(p.name, p.kind, p.default) for p in sync_params[1:]]
        astrip = [(p.name, p.kind, p.default) for p in async_params[1:]]
        assert strip == astrip, name


@pytest.mark.parametrize("async_cls", [AsyncQueue, AsyncJobHandle])
def test_every_async_operation_is_a_coroutine(async_cls: type) -> None:
    for name, member in _members(async_cls).items():
        if callable(member) and not isinstance(member, property):
            assert inspect.iscoroutinefunction(member), name


def test_async_worker_takes_the_same_arguments_and_methods_as_worker() -> None:
    from alkstore_sa import AsyncWorker, Worker

    def shape(cls: type) -> list[tuple[str, object, object]]:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return [(p.name, p.kind, p.default) for p in params]

    assert shape(Worker) == shape(AsyncWorker)
    assert set(_members(Worker)) - _FACE_ONLY == set(_members(AsyncWorker)) - _FACE_ONLY
    assert inspect.iscoroutinefunction(AsyncWorker.run)
    assert not inspect.iscoroutinefunction(AsyncWorker.stop)  # thread-safe, like Worker.stop


def test_async_store_queue_is_not_awaitable_but_close_is() -> None:
    # Q1: queue() touches no database, so it is a plain method on both faces.
    assert not inspect.iscoroutinefunction(AsyncStore.queue)
    assert inspect.iscoroutinefunction(AsyncStore.close)


def test_o_operations_are_on_both_faces_with_the_spec_signatures() -> None:
    """O1-O6: the operations the contract names, with its parameters, awaited on AsyncStore."""
    expected = {
        Queue: {
            "jobs": "(self, status=None, *, limit=100, before=None)",
            "requeue_dead": "(self, job_ids=None, *, limit=1000, session=None)",
            "purge_dead": "(self, job_ids=None, *, older_than=None, session=None)",
            "pause": "(self, *, session=None)",
            "resume": "(self, *, session=None)",
            "stats": "(self)",
        },
        Store: {"queue_names": "(self)", "stats": "(self)"},
    }
    for cls, methods in expected.items():
        for name, shape in methods.items():
            params = inspect.signature(getattr(cls, name)).parameters.values()
            bare = [p.replace(annotation=inspect.Parameter.empty) for p in params]
            assert str(inspect.Signature(bare)) == shape, (cls, name)
    for name in ("queue_names", "stats"):
        assert inspect.iscoroutinefunction(getattr(AsyncStore, name)), name
