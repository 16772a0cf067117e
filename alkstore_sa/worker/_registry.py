"""The worker's entry in the registry of workers (V1).

A run registers itself in every schema it serves -- its id, host, pid,
queues, concurrency and the package version -- at start, refreshes the row
every ``REFRESH_INTERVAL`` seconds (each refresh also prunes the rows of
workers long gone), and deletes it at the end of a graceful stop.  A worker
killed with SIGKILL, or cut off from its database, stops refreshing: after
``STALE_AFTER`` readers show it as gone.  A failed registration is logged
and tried again at the next refresh; it never holds up claims (its own
task, as the sweeps are).

The registry talks to the stores the worker's queues belong to, through
their own way of running an operation (``run_call``): a ``Store``'s call
runs in a thread, an ``AsyncStore``'s is awaited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import aio as _aio
from .. import store as _store
from .._calls import workers as _calls
from .._db.sql.workers import REFRESH_INTERVAL
from .._values.workers import WorkerInfo
from ._state import reraise_if_cancelled

__all__ = ["REFRESH_INTERVAL", "Registry", "WorkerInfo"]

log = logging.getLogger("alkstore_sa.worker")

Runner = Callable[[Callable[[Any], Any]], Awaitable[Any]]


@dataclass
class _Entry:
    """One schema of one store: where the worker's row lives."""

    schema: str
    queues: list[str]
    run: Runner
    failing: bool = False  # the last refresh failed (logged once until it works again)


def _sync_runner(store: _store.Store) -> Runner:
    async def run(call: Callable[[Any], Any]) -> Any:
        return await asyncio.to_thread(_store.run_call, store, call)

    return run


def _async_runner(store: _aio.AsyncStore) -> Runner:
    async def run(call: Callable[[Any], Any]) -> Any:
        return await _aio.run_call(store, call)

    return run


class Registry:
    """Registers one worker run, keeps its rows fresh, and removes them."""

    def __init__(self, worker_id: str, concurrency: int, entries: list[_Entry]) -> None:
        from .. import __version__

        self.worker_id = worker_id
        self._concurrency = concurrency
        self._entries = entries
        self._hostname = socket.gethostname()
        self._version = __version__

    @classmethod
    def of(
        cls,
        worker_id: str,
        concurrency: int,
        queues: Sequence[_store.Queue] | Sequence[_aio.AsyncQueue],
    ) -> Registry:
        """The entries of a worker serving ``queues``: one per store (engine and schema)."""
        by_store: dict[int, _Entry] = {}
        for queue in queues:
            store: _store.Store | _aio.AsyncStore
            if isinstance(queue, _aio.AsyncQueue):
                store, _ = _aio.queue_parts(queue)
                runner = _async_runner(store)
            else:
                store, _ = _store.queue_parts(queue)
                runner = _sync_runner(store)
            entry = by_store.get(id(store))
            if entry is None:
                entry = by_store[id(store)] = _Entry(store.schema, [], runner)
            if queue.name not in entry.queues:
                entry.queues.append(queue.name)
        return cls(worker_id, concurrency, list(by_store.values()))

    async def run(self) -> None:
        """Register, then refresh every ``REFRESH_INTERVAL`` seconds until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_INTERVAL)

    async def refresh(self) -> None:
        for entry in self._entries:
            call = _calls.register(
                entry.schema,
                worker_id=self.worker_id,
                hostname=self._hostname,
                pid=os.getpid(),
                queues=entry.queues,
                concurrency=self._concurrency,
                version=self._version,
            )
            try:
                await entry.run(call)
            except Exception as exc:
                reraise_if_cancelled(exc)
                if not entry.failing:
                    log.warning(
                        "worker %s could not register in schema %s: %s; trying again every %gs",
                        self.worker_id,
                        entry.schema,
                        str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc),
                        REFRESH_INTERVAL,
                    )
                entry.failing = True
            else:
                entry.failing = False

    async def remove(self) -> None:
        """The graceful stop's last step: the rows go (a failure is logged, not raised)."""
        for entry in self._entries:
            try:
                await entry.run(_calls.remove(entry.schema, self.worker_id))
            except Exception as exc:
                reraise_if_cancelled(exc)
                log.warning(
                    "worker %s could not remove its registration in schema %s: %s "
                    "(readers show it as gone in a minute)",
                    self.worker_id,
                    entry.schema,
                    exc,
                )
