"""X2: a worker's sync handlers in a ``concurrent.futures.Executor`` (``handler_executor``).

Only the handler's call moves: the job is claimed, heartbeated, acked (or
retried, failed, snoozed) by the worker as always, so a handler that holds
its process's GIL for seconds in a ``ProcessPoolExecutor`` child delays no
heartbeat and no ack of the worker's.

In a process pool the handler and the ``Job`` cross to the child pickled,
and what the handler returned or raised (``RetryJob``, ``FailJob``,
``SnoozeJob``, a result for ``keep_completed``) comes back pickled, so a
handler must be importable by name (a module-level function: checked when
the worker is built, as is the rule that a session-scoped handler cannot
run there -- its session and the ack in it live in the worker's process).
Nothing of the worker's reaches the child: ``job_cancelled()`` is False
there (a cancelled job's result is dropped when it comes back), and the
instrumentation's handler span is not entered around it.

A child that dies mid-job (killed, segfault, out of memory) breaks the
whole pool (``BrokenProcessPool`` for every job in flight in it): each of
those jobs fails like an exception and is retried on its queue's curve (B1
logs it), and the pool is replaced by a fresh one with the same settings,
which the worker shuts down at the end of the run.  Any other executor (a
``ThreadPoolExecutor``) runs handlers as the worker's own threads do, scope
and session included.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .._values.job import Job
from ._handlers import HandlerSpec, Scope, scoped

__all__ = ["HandlerPool", "handler_pool"]

log = logging.getLogger("alkstore_sa.worker")

POOL_EXIT_WAIT = 2.0  # seconds an owned pool's processes get to exit at close() before a kill


def handler_pool(
    executor: object, specs: Sequence[tuple[str, HandlerSpec]], *, owned: bool = False
) -> HandlerPool | None:
    """``executor`` checked against the handlers it would run; None for none.

    ``TypeError`` for something that is not an ``Executor``; ``ValueError``
    for a process pool and a session-scoped handler, or a handler that
    cannot be sent to a child process.
    """
    if executor is None:
        return None
    if not isinstance(executor, Executor):
        raise TypeError(
            "handler_executor takes a concurrent.futures.Executor "
            f"(ProcessPoolExecutor for CPU-bound handlers), got {type(executor).__name__}"
        )
    if isinstance(executor, ProcessPoolExecutor):
        for name, spec in specs:
            if spec.is_async:
                continue  # an AsyncWorker's async handlers run on its loop, as ever
            where = f"queue {name!r}: handler {spec.name}"
            if spec.wants_session:
                raise ValueError(
                    f"{where} is session-scoped and cannot run in a process pool: its "
                    "session, and the ack in it, belong to the worker's process "
                    "(use a ThreadPoolExecutor, or no handler_executor)"
                )
            try:
                pickle.dumps(spec.fn)
            except Exception as exc:  # any pickling error: the child could not get it
                raise ValueError(
                    f"{where} cannot be sent to a process pool (a handler there must be "
                    f"importable by name, e.g. a module-level function): {exc}"
                ) from None
    return HandlerPool(executor, owned=owned)


class HandlerPool:
    """Runs handlers in an executor; a broken process pool is replaced by a fresh one."""

    def __init__(self, executor: Executor, *, owned: bool = False) -> None:
        self._executor = executor
        self._owned = owned  # shut down at the end of the run (made here, or by the CLI)

    @property
    def processes(self) -> bool:
        return isinstance(self._executor, ProcessPoolExecutor)

    def run(self, fn: Callable[[Job], object], job: Job, scope: Scope) -> asyncio.Future[Any]:
        """Start ``fn(job)``; the future (of the running loop) gets its outcome."""
        if not self.processes:
            return self.submit(scoped(functools.partial(fn, job), scope))
        executor = self._executor
        try:
            done: Future[object] = executor.submit(fn, job)
        except BrokenProcessPool:  # broken by a job whose outcome is not back yet
            executor = self._replace(executor)
            done = executor.submit(fn, job)
        fut = asyncio.wrap_future(done)
        fut.add_done_callback(functools.partial(self._check, executor))
        return fut

    def submit(self, fn: Callable[[], object]) -> asyncio.Future[Any]:
        """``fn()`` in the executor (a thread-based one: ``fn`` need not pickle)."""
        return asyncio.wrap_future(self._executor.submit(fn))

    def _check(self, executor: Executor, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and isinstance(fut.exception(), BrokenProcessPool):
            self._replace(executor)

    def _replace(self, broken: Executor) -> Executor:
        """A fresh pool like ``broken`` (once per broken pool); returns the current one."""
        if broken is not self._executor:
            return self._executor  # replaced already, by another job it broke
        settings = {
            name: getattr(broken, f"_{name}")
            for name in ("max_workers", "mp_context", "initializer", "initargs")
            if hasattr(broken, f"_{name}")
        }
        if getattr(broken, "_max_tasks_per_child", None) is not None:
            settings["max_tasks_per_child"] = broken._max_tasks_per_child  # type: ignore[attr-defined]
        self._executor = ProcessPoolExecutor(**settings)
        self._owned = True
        log.warning(
            "handler process pool broken (a child process died mid-job); its jobs in "
            "flight are retried, and a fresh pool of %s process(es) runs the next ones",
            settings.get("max_workers", "?"),
        )
        broken.shutdown(wait=False, cancel_futures=True)
        return self._executor

    def adopt(self) -> None:
        """Shut the executor down at the end of the run, whoever made it: in an X1
        child, whose exit would otherwise hang on a process pool -- multiprocessing
        joins the child's own child processes before the pool's exit hook runs."""
        self._owned = True

    def close(self) -> None:
        """Shut down the run's own executor, waiting at most ``POOL_EXIT_WAIT``.

        An owned process pool's processes are ended here, not left to the
        interpreter's exit: an exit after ``shutdown(wait=False)`` can hang
        on the pool (cpython#83386; once in CI an X1 child never exited),
        and a handler still running in one now belongs to a job the
        shutdown has released already.  They get ``POOL_EXIT_WAIT`` to
        take the shutdown's sentinel, then are killed.
        """
        if not self._owned:
            return
        executor = self._executor
        # Read before shutdown(), which forgets them.
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + POOL_EXIT_WAIT
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        if alive := [p for p in processes if p.is_alive()]:
            log.warning(
                "handler process pool: %d process(es) still running a handler at the "
                "end of the run (their jobs were released); killing them",
                len(alive),
            )
            for process in alive:
                process.kill()
                process.join(POOL_EXIT_WAIT)
