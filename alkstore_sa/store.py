"""The sync face: ``Store``, ``Queue``, ``JobHandle``.

Each method validates through ``_core`` and runs the resulting call on a
connection: the caller's (``session=``) or one of the store's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import URL, Connection, Engine, create_engine
from sqlalchemy.orm import Session

from ._calls import Call
from ._calls import admin as _admin
from ._calls import core as _core
from ._calls import workers as _workers
from ._calls import workflow as _workflow
from ._calls.core import QueueCore
from ._calls.faces import HandleFace, Lifecycle, QueueFace
from ._calls.handle import HandleCore
from ._db.engines import check_engine, owned_engine_args
from ._db.owned import in_autocommit, own_connection
from ._db.sqlstate import schema_errors
from ._values.job import Job, JobStatus, QueueStats, SweepResult
from ._values.limits import Limits
from ._values.opts import EnqueueOpts, QueueOpts
from ._values.workers import WorkerInfo
from ._values.workflow import WorkflowStatus
from .schema import DEFAULT_SCHEMA

__all__ = ["JobHandle", "Queue", "Store"]

T = TypeVar("T")
SyncSession = Session | Connection


class Store:
    """A job store over a ``postgresql+psycopg`` engine and one schema."""

    def __init__(self, engine: Engine, *, schema: str = DEFAULT_SCHEMA) -> None:
        check_engine(engine, Engine, "Store")
        self._life = Lifecycle(schema)
        self.engine = engine
        self._owns_engine = False

    @classmethod
    def from_url(cls, url: str | URL, *, schema: str = DEFAULT_SCHEMA, **engine_kw: Any) -> Store:
        """A store that owns its engine (disposed on ``close()``)."""
        parsed, kw = owned_engine_args(url, engine_kw)
        store = cls(create_engine(parsed, **kw), schema=schema)
        store._owns_engine = True
        return store

    @property
    def schema(self) -> str:
        return self._life.schema

    @property
    def closed(self) -> bool:
        return self._life.closed

    def queue(self, name: str, opts: QueueOpts | None = None) -> Queue:
        """A handle on queue ``name``; validates, touches no database (Q1)."""
        self._life.check_open()
        return Queue(self, self._life, QueueCore(self.schema, name, opts))

    def queue_names(self) -> list[str]:
        """Every queue with a live row, a dead row or a pause in force, sorted (O6)."""
        return self._run(_admin.queue_names(self.schema))

    def stats(self) -> dict[str, QueueStats]:
        """``queue_names()`` mapped to each queue's stats, read in one snapshot (O6)."""
        return self._run(_admin.store_stats(self.schema))

    def workers(self) -> list[WorkerInfo]:
        """V1: the workers registered in this schema (running, or gone and not yet
        pruned), oldest start first, each with its jobs in flight."""
        return self._run(_workers.listing(self.schema))

    def workflow(self, run_id: int) -> WorkflowStatus | None:
        """G3: a workflow's steps counted by state; None when there is none (or it was swept)."""
        return self._run(_workflow.status(self.schema, run_id))

    def close(self) -> None:
        if self._life.close() and self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: Call[T], session: SyncSession | None = None, *, atomic: bool = False) -> T:
        self._life.check_open()
        with schema_errors(self.schema):
            if session is None:
                # The store's own connection: one that answered read-only
                # is invalidated, not pooled again (25006, a failover).
                if atomic:
                    with self.engine.begin() as conn:
                        return own_connection(call)(conn)
                with self.engine.connect() as conn:
                    return own_connection(in_autocommit(call))(conn)
            if isinstance(session, Session):
                return call(session.connection())
            if isinstance(session, Connection):
                return call(session)
            raise TypeError(
                f"session must be a Session or Connection, got {type(session).__name__}"
            )


class Queue(QueueFace[Store]):
    """A queue handle: a name plus the stamps it puts on what it enqueues."""

    __slots__ = ()

    def enqueue(
        self, payload: bytes, opts: EnqueueOpts | None = None, *, session: SyncSession | None = None
    ) -> int:
        self._life.check_open()
        return self._store._run(self._core.enqueue(payload, opts), session)

    def enqueue_many(
        self,
        payloads: Iterable[bytes],
        opts: EnqueueOpts | None = None,
        *,
        session: SyncSession | None = None,
        unique_keys: Iterable[str | None] | None = None,
    ) -> list[int]:
        """Ids in input order; ``unique_keys``: one key per payload, None for none (U1)."""
        self._life.check_open()
        return self._store._run(self._core.enqueue_many(payloads, opts, unique_keys), session)

    def claim_one(self, worker_id: str, *, session: SyncSession | None = None) -> JobHandle | None:
        handles = self.claim_batch(worker_id, 1, session=session)
        return handles[0] if handles else None

    def claim_batch(
        self,
        worker_id: str,
        n: int,
        *,
        max_batch_payload_bytes: int | None = None,
        session: SyncSession | None = None,
    ) -> list[JobHandle]:
        """Up to ``n`` jobs in claim order; ``max_batch_payload_bytes``: stop once
        their payloads add up to that many bytes (one job is always taken)."""
        self._life.check_open()
        call = self._core.claim(worker_id, n, max_batch_payload_bytes)
        if call is None:
            return []
        return [
            JobHandle(self._store, self._life, HandleCore(self._core, job))
            for job in self._store._run(call, session)
        ]

    def ack_batch(self, job_ids: Iterable[int], *, session: SyncSession | None = None) -> int:
        self._life.check_open()
        call = self._core.ack_batch(job_ids)
        return 0 if call is None else self._store._run(call, session)

    def cancel(self, job_id: int, *, session: SyncSession | None = None) -> bool:
        self._life.check_open()
        return self._store._run(self._core.cancel(job_id), session)

    def get_job(self, job_id: int) -> Job | None:
        self._life.check_open()
        return self._store._run(self._core.get_job(job_id))

    def wait(self, job_id: int, *, timeout: float | timedelta | None = None) -> Job | None:
        """R3: the job's final ``Job`` once completed or dead; None once its row is
        gone with nothing kept; ``TimeoutError`` at ``timeout`` (None: forever)."""
        self._life.check_open()
        checked = _core.wait_args(job_id, timeout)
        from ._extras.waiters import wait_sync  # the listener loads only for a wait

        return wait_sync(self, *checked)

    def sweep_expired(self, *, session: SyncSession | None = None) -> SweepResult:
        """Q25; with ``session``, in the caller's transaction, else in one of its own."""
        self._life.check_open()
        return self._store._run(self._core.sweep_expired(), session, atomic=True)

    def jobs(
        self, status: JobStatus | None = None, *, limit: int = 100, before: int | None = None
    ) -> list[Job]:
        self._life.check_open()
        return self._store._run(self._core.jobs(status, limit, before))

    def requeue_dead(
        self,
        job_ids: Iterable[int] | None = None,
        *,
        limit: int = 1000,
        session: SyncSession | None = None,
    ) -> int:
        self._life.check_open()
        call = self._core.requeue_dead(job_ids, limit)
        return 0 if call is None else self._store._run(call, session)

    def purge_dead(
        self,
        job_ids: Iterable[int] | None = None,
        *,
        older_than: float | timedelta | None = None,
        session: SyncSession | None = None,
    ) -> int:
        self._life.check_open()
        call = self._core.purge_dead(job_ids, older_than)
        return 0 if call is None else self._store._run(call, session)

    def pause(self, *, session: SyncSession | None = None) -> bool:
        self._life.check_open()
        return self._store._run(self._core.pause(), session)

    def resume(self, *, session: SyncSession | None = None) -> bool:
        self._life.check_open()
        return self._store._run(self._core.resume(), session)

    def set_limits(self, limits: Limits | None, *, session: SyncSession | None = None) -> None:
        """F1: replace every limit of the queue; None removes them (a pause stays)."""
        self._life.check_open()
        call = self._core.set_limits(limits)
        self._store._run(call, session)

    def limits(self) -> Limits | None:
        """F1: the queue's limits, None when it has none."""
        self._life.check_open()
        return self._store._run(self._core.limits())

    def stats(self) -> QueueStats:
        self._life.check_open()
        return self._store._run(self._core.stats())


class JobHandle(HandleFace[Store]):
    """One claim of one job. Every op returns ``False`` once the claim is gone."""

    __slots__ = ()

    def ack(self, result: bytes | None = None, *, session: SyncSession | None = None) -> bool:
        """Q16; R1: a job stamped with keep_completed is kept, with ``result``."""
        self._life.check_open()
        return self._store._run(self._core.ack(result), session)

    def retry(
        self,
        error: str | None = None,
        delay: float | timedelta | None = None,
        *,
        session: SyncSession | None = None,
    ) -> bool:
        self._life.check_open()
        return self._store._run(self._core.retry(error, delay), session) is not None

    def fail(self, error: str | None = None, *, session: SyncSession | None = None) -> bool:
        self._life.check_open()
        return self._store._run(self._core.fail(error), session)

    def snooze(self, delay: float | timedelta, *, session: SyncSession | None = None) -> bool:
        """Z1: pending again ``delay`` seconds from now, the attempt refunded, no error kept."""
        self._life.check_open()
        return self._store._run(self._core.snooze(delay), session)

    def heartbeat(self, extend: float | timedelta, *, session: SyncSession | None = None) -> bool:
        self._life.check_open()
        call = self._core.heartbeat(extend)
        return False if call is None else self._store._run(call, session)


# -- for the worker's backend: the store's own way of running an operation -----


def run_call(
    store: Store, call: Call[T], session: SyncSession | None = None, *, atomic: bool = False
) -> T:
    """Run ``call`` exactly as ``store``'s own methods do (lifecycle, errors, connection).

    ``atomic``: in one transaction of its own (a multi-statement call like a sweep).
    """
    return store._run(call, session, atomic=atomic)


def queue_parts(queue: Queue) -> tuple[Store, QueueCore]:
    """The store behind ``queue`` and its I/O-free core (validated name, options, address)."""
    return queue._store, queue._core
