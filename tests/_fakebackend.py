"""An in-memory backend for the worker runtime, on the fake clock's loop.

``FakeDB`` is one queue's table judged by the loop's clock: claims take due
pending rows in claim order and set a deadline, heartbeats extend held
claims, acks delete them -- each checking the claim's identity (id,
attempts) and its deadline, as the real statements do.  Every call is
logged with the (virtual) time it was made, and a call can be made to fail
(``fail_next``) to test how the runtime copes with a database error.

``FakePort`` is the ``QueuePort`` over it; handlers are ``async`` functions
run on the loop.  ``like_a_thread=True`` hands the runtime a future that
cannot be cancelled, as a sync handler in a thread cannot be.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from alkstore_sa import Job, QueueOpts, SchemaMissingError, SweepResult
from alkstore_sa._calls.core import QueueCore
from alkstore_sa._db.ops import Released, Retried
from alkstore_sa._db.vacuum import Vacuumed
from alkstore_sa.worker._handlers import awaited_in, inspect_handler
from alkstore_sa.worker._port import ClaimKey, QueuePort
from alkstore_sa.worker._state import QueueBinding, Settings
from alkstore_sa.worker._supervisor import Supervisor

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_ids = itertools.count(1)


@dataclass
class Row:
    job: Job
    deadline: float = 0.0  # loop time the claim lapses (processing rows)
    due: float = 0.0  # loop time it becomes claimable (pending rows)


@dataclass
class Call:
    at: float
    op: str
    args: tuple[Any, ...]


@dataclass
class FakeDB:
    """One queue's rows, and a log of every call made to it."""

    loop: asyncio.AbstractEventLoop
    queue: str = "q"
    rows: dict[int, Row] = field(default_factory=dict)
    dead: dict[int, Row] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    fail_next: dict[str, int] = field(default_factory=dict)  # op -> how many calls fail
    wake: Callable[[str], None] | None = None  # the listener's, once it listens
    claim_latency: float = 0.0  # how long a claim's round trip takes (virtual seconds)
    reply_latency: float = 0.0  # how long its reply then takes, the claim committed (C1)
    expired: set[int] = field(default_factory=set)  # ids whose expires_at has passed
    paused: bool = False  # O4: claims get nothing
    schema_missing: bool = False  # B5: check_schema raises SchemaMissingError
    # A vacuum that never ends and, cancelled, raises another error (as an
    # async driver cleaning up a cancelled statement can).
    vacuum_hangs: bool = False
    outcomes: list[tuple[int, int, int]] = field(default_factory=list)  # W2 tallies flushed

    def now(self) -> float:
        return self.loop.time()

    def enqueue(
        self,
        *,
        delay: float = 0.0,
        visibility_timeout: float = 30.0,
        notify: bool = True,
        max_attempts: int = 5,
    ) -> int:
        job_id = next(_ids)
        job = Job(
            id=job_id,
            queue=self.queue,
            payload=b"",
            status="pending",
            priority=0,
            run_at=EPOCH + timedelta(seconds=self.now() + delay),
            attempts=0,
            max_attempts=max_attempts,
            visibility_timeout=visibility_timeout,
            expires_at=None,
            worker_id=None,
            claim_deadline=None,
            created_at=EPOCH,
            last_error=None,
            died_at=None,
        )
        self.rows[job_id] = Row(job, due=self.now() + delay)
        if notify and self.wake is not None:
            self.wake(self.queue)
        return job_id

    def log(self, op: str, *args: Any) -> None:
        self.calls.append(Call(self.now(), op, args))
        if self.fail_next.get(op, 0) > 0:
            self.fail_next[op] -= 1
            raise ConnectionError(f"{op}: the database went away")

    def times(self, op: str) -> list[float]:
        return [round(c.at, 6) for c in self.calls if c.op == op]

    def held(self, claim: ClaimKey) -> Row | None:
        row = self.rows.get(claim[0])
        if row is None or row.job.status != "processing" or row.job.attempts != claim[1]:
            return None
        return row if row.deadline > self.now() else None

    # -- the operations a port asks for ---------------------------------------

    def claim(self, worker_id: str, n: int) -> list[Job]:
        self.log("claim", n)
        if self.paused:
            return []
        due = sorted(
            (r for r in self.rows.values() if r.job.status == "pending" and r.due <= self.now()),
            key=lambda r: (r.due, r.job.id),
        )[:n]
        for row in due:
            row.job = replace(
                row.job, status="processing", attempts=row.job.attempts + 1, worker_id=worker_id
            )
            row.deadline = self.now() + row.job.visibility_timeout
        return [row.job for row in due]

    def extend(self, claims: Sequence[ClaimKey]) -> list[int]:
        self.log("heartbeat", *claims)
        extended = []
        for claim in claims:
            row = self.held(claim)
            if row is not None:
                row.deadline = self.now() + row.job.visibility_timeout
                extended.append(claim[0])
        return extended

    def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        self.log("ack", *claims)
        acked = [claim[0] for claim in claims if self.held(claim) is not None]
        for job_id in acked:
            del self.rows[job_id]
        return acked

    def settle(self, op: str, claim: ClaimKey, error: str | None, delay: float | None) -> bool:
        """retry / fail / release of a held claim."""
        self.log(op, claim, error, delay)
        row = self.held(claim)
        if row is None:
            return False
        if op == "fail":
            del self.rows[claim[0]]
            self.dead[claim[0]] = row
        else:
            row.job = replace(row.job, status="pending", worker_id=None, last_error=error)
            row.due = self.now() + (delay or 0.0)
        return True

    def resume(self) -> None:
        """O4: lift the pause and notify, as ``Queue.resume()`` does."""
        self.paused = False
        if self.wake is not None:
            self.wake(self.queue)

    def cancel(self, job_id: int) -> None:
        """Q23: the row deleted (C1's notification is the test's to send)."""
        self.rows.pop(job_id, None)

    def reclaim(self, job_id: int) -> None:
        """The claim lost to another worker's claim (a lapse and a reclaim): row still there."""
        row = self.rows[job_id]
        row.job = replace(row.job, attempts=row.job.attempts + 1, worker_id="other")

    def sweep(self) -> SweepResult:
        """Expired rows (``expired`` set) go dead; the fake keeps dead rows forever."""
        self.log("sweep")
        expired = [job_id for job_id in self.rows if job_id in self.expired]
        for job_id in expired:
            self.dead[job_id] = self.rows.pop(job_id)
        return SweepResult(expired=len(expired), purged=0)


class FakePort:
    def __init__(
        self,
        db: FakeDB,
        handler: Callable[[Job], Awaitable[object]],
        *,
        like_a_thread: bool = False,
    ) -> None:
        self.db = db
        self._handler = handler
        self._like_a_thread = like_a_thread

    @property
    def listen_group(self) -> Hashable:
        return id(self.db)

    async def claim(
        self,
        worker_id: str,
        n: int,
        max_batch_payload_bytes: int | None = None,
        *,
        on_reply: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        # The byte bound is the SQL's (tests/sql/test_r_batch_payload_bytes.py pins it).
        await asyncio.sleep(self.db.claim_latency)
        jobs = self.db.claim(worker_id, n)
        if self.db.reply_latency:
            await asyncio.sleep(self.db.reply_latency)
        if on_reply is not None:  # on the loop, as the async runner does
            on_reply(jobs)
        return jobs

    def abort_claim(self) -> None:
        pass  # the in-memory claim never waits on a peer

    async def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        return self.db.ack(claims)

    async def ack_kept(self, claim: ClaimKey, result: bytes | None) -> bool:
        return bool(self.db.ack([claim]))

    async def heartbeat(self, claims: Sequence[ClaimKey]) -> list[int]:
        return self.db.extend(claims)

    async def gone(self, job_ids: Sequence[int]) -> list[int]:
        self.db.log("gone", list(job_ids))
        return [i for i in job_ids if i not in self.db.rows and i not in self.db.dead]

    async def retry(
        self, claim: ClaimKey, error: str | None, delay: float, traceback: str | None
    ) -> Retried | None:
        row = self.db.held(claim)
        exhausted = row is not None and row.job.attempts >= row.job.max_attempts
        if not self.db.settle("fail" if exhausted else "retry", claim, error, delay):
            return None
        return "dead" if exhausted else "retried"

    async def fail(self, claim: ClaimKey, error: str | None, traceback: str | None) -> bool:
        return self.db.settle("fail", claim, error, None)

    async def snooze(self, claim: ClaimKey, delay: float) -> bool:
        return self.db.settle("retry", claim, None, delay)

    async def release(self, claim: ClaimKey) -> Released | None:
        return "released" if self.db.settle("release", claim, None, None) else None

    async def sweep(self) -> SweepResult:
        return self.db.sweep()

    async def listen_conninfo(self, application_name: str) -> str:
        return ""

    async def vacuum(self, min_dead: int, live_fraction: float) -> Vacuumed:
        self.db.log("vacuum")
        if self.db.vacuum_hangs:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise RuntimeError(
                    "Can't reconnect until invalid transaction is rolled back"
                ) from None
        return "not needed"

    async def record_outcomes(self, acked: int, retried: int, dead: int) -> None:
        self.db.outcomes.append((acked, retried, dead))

    async def check_schema(self) -> None:
        if self.db.schema_missing:
            raise SchemaMissingError("no alkstore tables (fake)")

    def start(
        self, job: Job, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        run = self._handler(job)
        task = asyncio.ensure_future(run if scope is None else awaited_in(scope, run))
        return asyncio.shield(task) if self._like_a_thread else task

    def follow(self, result: Awaitable[object]) -> asyncio.Future[object]:
        return asyncio.ensure_future(result)


class FakeBackend:
    """LISTEN is the FakeDB's ``wake`` hook: an enqueue notifies, once 'connected'."""

    def __init__(self, *, listen_after: float = 0.001, relisten_at: tuple[float, ...] = ()) -> None:
        self.closed = False
        self.notify: Any = None  # the listener's wake, once it listens
        self.channels: list[str] = []
        self._listen_after = listen_after
        self._relisten_at = relisten_at  # loop times LISTEN drops and comes back at once

    async def listen(
        self,
        port: QueuePort,
        application_name: str,
        channels: Sequence[str],
        wake: Callable[[str], None],
        on_listening: Callable[[bool], None],
        recovery: object = None,
    ) -> None:
        assert isinstance(port, FakePort)
        await asyncio.sleep(self._listen_after)
        # The queue's channel comes after the store's control channel (C1).
        port.db.wake = lambda queue: wake(channels[-1])
        self.notify = wake  # C1: ``notify(channel, payload)`` as a NOTIFY would
        self.channels = list(channels)
        on_listening(True)
        loop = asyncio.get_running_loop()
        for at in self._relisten_at:
            await asyncio.sleep(at - loop.time())
            on_listening(False)
            on_listening(True)
        await asyncio.Event().wait()  # until cancelled

    def close(self) -> None:
        self.closed = True


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = dict(
        worker_id="w",
        concurrency=2,
        poll_interval=1.0,
        shutdown_timeout=30.0,
        job_timeout=None,
        sweep_interval=None,
        vacuum_interval=None,
        handle_signals=False,
    )
    return Settings(**{**base, **overrides})


def bind(
    db: FakeDB,
    handler: Callable[[Job], Awaitable[object]],
    *,
    like_a_thread: bool = False,
    opts: QueueOpts | None = None,
) -> QueueBinding:
    core = QueueCore("alkstore", db.queue, opts)
    return QueueBinding(
        core, inspect_handler(handler, "test"), FakePort(db, handler, like_a_thread=like_a_thread)
    )


async def run_for(
    supervisor: Supervisor,
    bindings: list[QueueBinding],
    backend: FakeBackend,
    *,
    stop_at: float | None,
    second_stop_at: float | None = None,
) -> float:
    """Run the supervisor, calling ``stop()`` at those loop times; returns when run() returned."""
    loop = asyncio.get_running_loop()
    if stop_at is not None:
        loop.call_at(stop_at, supervisor.stop)
    if second_stop_at is not None:
        loop.call_at(second_stop_at, supervisor.stop)
    await supervisor.run(bindings, backend)
    return loop.time()
