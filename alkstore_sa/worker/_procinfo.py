"""What the X1 supervisor knows of its children, and the factory check (no I/O here).

``ChildHealth``/``ProcessesHealth``: every child's last health report, as
``--health-port`` serves them.  ``flatten``/``combine``: the children's
metric samples summed, as ``--metrics-port`` serves them.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from ._child import Family
from ._state import WorkerHealth

__all__ = [
    "STALE_AFTER",
    "ChildHealth",
    "ProcessesHealth",
    "SampleKey",
    "check_factory",
    "combine",
    "flatten",
]

STALE_AFTER = 5.0  # a child silent this long is reported unhealthy

SampleKey = tuple[str, str, tuple[tuple[str, str], ...]]


class ChildHealth(NamedTuple):
    """One child as the supervisor sees it: ``health`` is its last report (None: none yet)."""

    slot: int
    pid: int | None
    worker_id: str | None
    alive: bool
    health: WorkerHealth | None
    reported_ago: float | None  # seconds since its last report
    restarts: int

    @property
    def healthy(self) -> bool:
        return (
            self.alive
            and self.health is not None
            and self.health.healthy
            and self.reported_ago is not None
            and self.reported_ago < STALE_AFTER
        )


class ProcessesHealth(NamedTuple):
    """Every child's health; ``healthy`` while running and every child is."""

    running: bool
    processes: int
    children: tuple[ChildHealth, ...]

    @property
    def healthy(self) -> bool:
        return (
            self.running
            and len(self.children) == self.processes
            and all(c.healthy for c in self.children)
        )


def check_factory(factory: object) -> Callable[[], object]:
    """``factory`` as the children will import it, or a ValueError/TypeError saying why not."""
    if not callable(factory):
        raise TypeError(
            f"run_processes takes a function returning a Worker or AsyncWorker (each process "
            f"builds its own), got {type(factory).__name__}"
        )
    inner: Any = factory
    while isinstance(inner, partial):
        inner = inner.func
    qualname = getattr(inner, "__qualname__", "")
    module = getattr(inner, "__module__", None)
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(
            f"run_processes: factory {qualname} is a lambda or defined inside a function; the "
            "worker processes import it by name (spawn), so give a function defined at the "
            "top level of a module"
        )
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        raise ValueError(
            f"run_processes: factory {qualname} is defined in an interactive session; the "
            "worker processes import it by name, so define it in a module"
        )
    try:
        pickle.dumps(factory)
    except Exception as exc:
        raise ValueError(
            f"run_processes: the worker processes cannot import factory {qualname or factory!r}"
            f" by name: {exc}"
        ) from None
    return factory


def flatten(families: list[Family] | None) -> list[tuple[SampleKey, float]]:
    return [((name, sample, labels), value)
            for name, _, _, samples in families or ()
            for sample, labels, value in samples]  # fmt: skip


def combine(key: SampleKey, old: float | None, value: float) -> float:
    if old is None:
        return value
    # A counter's creation time: the earliest child's, not a sum of timestamps.
    return min(old, value) if key[1].endswith("_created") else old + value
