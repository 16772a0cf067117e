"""The completer: acks of successful jobs, batched across jobs and queues.

Handlers that return hand their claim here and get a future that says
whether the ack landed.  One flush runs at a time; whatever piles up during
it goes out in the next one, so under load many acks share a round trip and
when idle an ack waits for none.  The acks check ``(id, attempts)``
(``QueueCore.ack_claims``), so a job that lapsed and was reclaimed elsewhere
is never acked by its old claimant.  A flush that fails (database away) is
retried with backoff; the claims stay heartbeated meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .._core import Call, QueueCore

__all__ = ["Completer"]

log = logging.getLogger("alkstore_sa.worker")

RETRY_FIRST = 0.1
RETRY_CAP = 2.0

Runner = Callable[[Any, Call[list[int]]], Awaitable[list[int]]]
Pending = list[tuple[int, int, "asyncio.Future[bool]"]]


class Completer:
    def __init__(self, run: Runner) -> None:
        self._run = run
        # keyed by queue identity: (store, QueueCore) -> claims waiting for an ack
        self._pending: dict[tuple[int, int], tuple[Any, QueueCore, Pending]] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def ack(self, store: Any, queue: QueueCore, job_id: int, attempts: int) -> asyncio.Future[bool]:
        """Queue an ack; the future resolves to whether it was acked."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        key = (id(store), id(queue))
        entry = self._pending.setdefault(key, (store, queue, []))
        entry[2].append((job_id, attempts, fut))
        self._idle.clear()
        self._wake.set()
        return fut

    async def run(self) -> None:
        """Flush until cancelled."""
        delay = RETRY_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            failed = await self._flush(batch)
            if failed:
                # Put the failed claims back in front and try again later.
                for key, (store, queue, items) in failed.items():
                    entry = self._pending.setdefault(key, (store, queue, []))
                    entry[2][:0] = items
                self._wake.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)
                continue
            delay = RETRY_FIRST
            if not self._pending:
                self._idle.set()

    async def _flush(
        self, batch: dict[tuple[int, int], tuple[Any, QueueCore, Pending]]
    ) -> dict[tuple[int, int], tuple[Any, QueueCore, Pending]]:
        failed: dict[tuple[int, int], tuple[Any, QueueCore, Pending]] = {}

        async def one(key: tuple[int, int], store: Any, queue: QueueCore, items: Pending) -> None:
            claims = [(job_id, attempts) for job_id, attempts, _ in items]
            try:
                acked = set(await self._run(store, queue.ack_claims(claims)))
            except Exception as exc:
                log.warning(
                    "acking %d job(s) of %s failed: %s; will retry", len(items), queue.name, exc
                )
                failed[key] = (store, queue, items)
                return
            for job_id, _, fut in items:
                if not fut.done():
                    fut.set_result(job_id in acked)

        await asyncio.gather(*(one(k, s, q, items) for k, (s, q, items) in batch.items()))
        return failed

    async def drain(self, timeout: float) -> bool:
        """Wait until every queued ack has been flushed; ``False`` on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def abandon(self) -> int:
        """Resolve what is still queued as not acked (shutdown gave up); returns how many."""
        count = 0
        for _, _, items in self._pending.values():
            for _, _, fut in items:
                if not fut.done():
                    fut.set_result(False)
                    count += 1
        self._pending.clear()
        return count
