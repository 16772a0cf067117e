"""What the sync and async faces share, written once: the open/closed state, properties, repr.

``Queue``/``AsyncQueue`` and ``JobHandle``/``AsyncJobHandle`` differ only in
how they run an operation (directly, or awaited); everything that does no
I/O lives here, generic in the store type they belong to.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .._values import validate as v
from .._values.errors import StoreClosedError
from .._values.job import Job
from .._values.opts import QueueOpts
from .core import QueueCore
from .handle import HandleCore

__all__ = ["HandleFace", "Lifecycle", "QueueFace"]

S = TypeVar("S")


class Lifecycle:
    """The open/closed state every store face shares (Q29)."""

    __slots__ = ("_closed", "schema")

    def __init__(self, schema: object) -> None:
        self.schema = v.schema_name(schema)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def close(self) -> bool:
        """Mark closed; ``True`` the first time only."""
        first = not self._closed
        self._closed = True
        return first


class QueueFace(Generic[S]):
    """A queue handle: a name plus the stamps it puts on what it enqueues."""

    __slots__ = ("_core", "_life", "_store")

    def __init__(self, store: S, life: Lifecycle, core: QueueCore) -> None:
        self._store = store
        self._life = life
        self._core = core

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def opts(self) -> QueueOpts:
        return self._core.opts

    @property
    def store(self) -> S:
        """The store this handle belongs to."""
        return self._store

    @property
    def channel(self) -> str:
        """The wake channel (quote it as an identifier to LISTEN)."""
        return self._core.address.channel

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} schema={self._life.schema!r}>"


class HandleFace(Generic[S]):
    """One claim of one job. Every op returns ``False`` once the claim is gone (Q14)."""

    __slots__ = ("_core", "_life", "_store")

    def __init__(self, store: S, life: Lifecycle, core: HandleCore) -> None:
        self._store = store
        self._life = life
        self._core = core

    @property
    def job(self) -> Job:
        """The row as claimed."""
        return self._core.job

    @property
    def id(self) -> int:
        return self._core.job.id

    @property
    def payload(self) -> bytes:
        return self._core.job.payload

    def __repr__(self) -> str:
        return f"<{type(self).__name__} job={self.id} attempt={self._core.job.attempts}>"
