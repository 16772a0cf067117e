"""The seam between the worker runtime and the database: a port per queue.

The runtime (producer, executor, heartbeats, supervisor) never sees a
store, a connection or a SQL call.  Everything it asks of the database, and
how a handler is started, goes through the ``QueuePort`` of the queue
concerned; the run's ``Backend`` owns what the ports share (threads, held
connections) and is closed when the run ends.  ``_store_port.py`` has the
one real port, over a ``Store`` or an ``AsyncStore`` through a runner
(``_sync_runner.py``, ``_async_runner.py``); the tests have an in-memory
one driven by a virtual clock, so the runtime's timing is tested in
milliseconds.

A claim is known everywhere by one identity, its ``ClaimKey``.

Every method but ``start``/``follow`` may raise whatever the database
raised: the runtime logs it and carries on (retries later, or lets the
claim lapse), so a port never needs to hide errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from .._db.ops import Released, Retried
from .._db.vacuum import Vacuumed
from .._values.job import Job, SweepResult

if TYPE_CHECKING:
    from ..tasks._periodic import Fired, Periodic

__all__ = ["Backend", "ClaimKey", "FiringPort", "QueuePort", "Wake"]

# A claim's identity: (job id, attempts at the claim).  The job id alone is
# not enough, since a worker may reclaim its own lapsed job (Q14).
ClaimKey = tuple[int, int]


class QueuePort(Protocol):
    """What a worker run asks of one queue's database, and how it starts handlers."""

    @property
    def listen_group(self) -> Hashable:
        """Ports of one group share a LISTEN connection (one per engine)."""
        ...

    async def claim(
        self,
        worker_id: str,
        n: int,
        max_batch_payload_bytes: int | None = None,
        *,
        on_reply: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        """Claim up to ``n`` due jobs for ``worker_id``, in claim order (Q8-Q12).

        ``max_batch_payload_bytes``: stop once their payloads add up to that
        many bytes, but always take at least one.  ``on_reply``: called once
        with the very list this returns, as soon as the reply is in -- on
        the thread that received it when ``start`` is safe there (a
        ``Worker``'s claim thread), else on the loop -- so that handlers
        start before the loop has seen the reply.
        """
        ...

    def abort_claim(self) -> None:
        """Break the connection the claim in flight waits on, if any.

        The producer calls it when a claim got no reply within its bound: the
        awaited ``claim`` then ends with a connection error instead of
        waiting on a silent peer.
        """
        ...

    async def ack(self, claims: Sequence[ClaimKey]) -> list[int]:
        """Ack the claims still held; returns the acked job ids."""
        ...

    async def ack_kept(self, claim: ClaimKey, result: bytes | None) -> bool:
        """R1: ack a claim of a job stamped with keep_completed, keeping ``result``."""
        ...

    async def heartbeat(self, claims: Sequence[ClaimKey]) -> list[int]:
        """Extend the claims still held by each job's visibility timeout; returns their ids."""
        ...

    async def gone(self, job_ids: Sequence[int]) -> list[int]:
        """C1: those of ``job_ids`` with no row left, live, dead or kept (cancelled)."""
        ...

    async def retry(
        self, claim: ClaimKey, error: str | None, delay: float, traceback: str | None
    ) -> Retried | None:
        """Q17/Q18 for a held claim: due ``delay`` seconds from now; ``traceback`` kept (B2).

        ``"dead"`` when it was the last attempt; None when the claim was gone.
        """
        ...

    async def snooze(self, claim: ClaimKey, delay: float) -> bool:
        """Z1 for a held claim: due ``delay`` seconds from now, attempt refunded.

        False when the claim was gone.
        """
        ...

    async def fail(self, claim: ClaimKey, error: str | None, traceback: str | None) -> bool:
        """Q19 for a held claim; ``traceback`` into the history (B2).  False when it was gone."""
        ...

    async def release(self, claim: ClaimKey) -> Released | None:
        """Give a held claim back: pending, due now, attempt kept (Q27).

        ``"dead"`` when it was the job's last attempt (dead-lettered instead);
        None when the claim was no longer held.
        """
        ...

    async def sweep(self) -> SweepResult:
        """Q12 + Q25 for this queue, with its handle's options (O7)."""
        ...

    async def record_outcomes(self, acked: int, retried: int, dead: int) -> None:
        """W2: add these outcome counts to the queue's per-minute throughput row."""
        ...

    async def check_schema(self) -> None:
        """Raise ``SchemaMissingError`` when this queue's tables are missing or outdated (B5)."""
        ...

    async def vacuum(self, min_dead: int, live_fraction: float) -> Vacuumed:
        """VACUUM this queue's jobs table if it holds that many dead row versions."""
        ...

    async def listen_conninfo(self, application_name: str) -> str:
        """The psycopg connection string of this queue's LISTEN connection."""
        ...

    def start(
        self, job: Job, scope: AbstractContextManager[object] | None
    ) -> asyncio.Future[object]:
        """Start the queue's handler on ``job`` (just claimed); the future gets its outcome.

        Called on the loop, or from ``claim``'s ``on_reply`` wherever the port
        runs that.

        ``scope`` (the instrumentation's, e.g. a tracing span) is entered
        around the handler's run in its own thread or task.

        A session-scoped handler's future resolves to whether its session's
        ack landed (Q28); a plain handler's to whatever it returned.
        """
        ...

    def follow(self, result: Awaitable[object]) -> asyncio.Future[object]:
        """What to wait for when a handler called as sync returned an awaitable."""
        ...


class FiringPort(Protocol):
    """What the periodic scheduler asks of the queue a schedule enqueues onto (P1)."""

    async def fire(self, schedule: Periodic) -> Fired:
        """Fire ``schedule`` if a slot of it is due: one transaction (``Periodic.fire_call``)."""
        ...


class Wake(Protocol):
    """The listener's callback: a notification on ``channel`` with its ``payload``."""

    def __call__(self, channel: str, payload: str = "", /) -> None: ...


class Recovery(Protocol):
    """Whether the database answers the run's other calls again (``RunState``)."""

    @property
    def recoveries(self) -> int:
        """How many times the database answered after a run of failed calls."""
        ...

    async def backoff(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less if the database answers meanwhile (then True)."""
        ...


class Backend(Protocol):
    """What a run's ports share; closed once when the run ends."""

    async def listen(
        self,
        port: QueuePort,
        application_name: str,
        channels: Sequence[str],
        wake: Wake,
        on_listening: Callable[[bool], None],
        recovery: Recovery,
    ) -> None:
        """LISTEN on ``channels`` where ``port``'s database is, until cancelled.

        ``wake(channel, payload)`` for each notification; ``on_listening(True)`` each
        time LISTEN is (re)established, since notifications sent while it was
        down are lost, and ``on_listening(False)`` each time it is lost.  A
        reconnect's backoff ends, and restarts from its floor, once
        ``recovery`` says the database answers again.
        """
        ...

    def close(self) -> None: ...
