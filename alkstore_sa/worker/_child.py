"""One child of ``run_processes`` (X1): build the worker, run it, report to the supervisor.

The supervisor starts this module's ``child_main`` with the ``spawn``
start method: a fresh interpreter that imports the factory by reference,
so no connection, engine or thread of the parent crosses into it.

The child talks to the supervisor over one pipe.  It sends ``ready``
once its worker's run is under way, ``health`` (its ``WorkerHealth`` and,
with metrics, its counters) every ``REPORT_EVERY`` seconds, and ``failed``
with one line when building or starting its worker raised.  It receives
``stop`` (level 1: a graceful stop, level 2: end the grace).  The pipe
closing without a stop means the supervisor died: the child stops
gracefully rather than run on as an orphan.

Once its worker's run has ended (its jobs released, its acks flushed)
the child has ``EXIT_WAIT`` seconds to exit; what could hold an exit
longer -- a thread left running, child processes of its own -- is ended
with it, so a stop never leaves the supervisor waiting on a child for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .._values.errors import AlkstoreError
from ._worker import AsyncWorker, Worker, own_handler_executor

__all__ = ["EXIT_WAIT", "REPORT_EVERY", "child_main", "one_line"]

log = logging.getLogger("alkstore_sa.worker")

REPORT_EVERY = 0.5  # seconds between health reports
READY_POLL = 0.02  # how often the child looks whether its run has started
EXIT_WAIT = 5.0  # seconds the child's exit may take once its worker's run has ended

# (family name, type, help, [(sample name, sorted label pairs, value)])
Family = tuple[str, str, str, list[tuple[str, tuple[tuple[str, str], ...], float]]]


def one_line(exc: BaseException) -> tuple[str, int]:
    """The one line (and exit code) a failure at start is reported with.

    An error that carries its own ``message`` and ``code`` (the CLI's) keeps
    them; the library's own errors speak for themselves; anything else is
    named by its type, as a traceback's last line would be.
    """
    message = getattr(exc, "message", None)
    code = getattr(exc, "code", None)
    if isinstance(message, str) and isinstance(code, int):
        return message, code
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, AlkstoreError):
        return text or type(exc).__name__, 1
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__), 1


def _own_process_group() -> None:
    # A Ctrl-C in a terminal signals the whole foreground group: the
    # supervisor forwards it once, so the children must not also get it
    # (a second stop would end their grace).
    with contextlib.suppress(OSError):  # a session leader cannot: it keeps its group
        os.setpgid(0, 0)


class _Child:
    def __init__(self, conn: Connection, metrics: bool) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.worker: Worker | AsyncWorker | None = None
        self.ready = False
        self.stops = 0  # the level the supervisor asked for
        self.lock = threading.Lock()
        self.registry: Any = None
        if metrics:
            from prometheus_client import CollectorRegistry

            from .. import prometheus

            # A registry of its own: the worker's counters only (the default
            # registry's process metrics would be nonsense summed).
            self.registry = CollectorRegistry(auto_describe=False)
            prometheus.instrument(self.registry)

    def send(self, *message: object) -> None:
        # OSError/ValueError: the supervisor is gone, nothing to tell.
        with self.send_lock, contextlib.suppress(OSError, ValueError):
            self.conn.send(message)

    def stop(self, level: int) -> None:
        with self.lock:
            if level <= self.stops:
                return
            self.stops = level
            worker, ready = self.worker, self.ready
        if worker is None:
            return  # not built yet: main() sees self.stops and never runs it
        # A direct signal (systemd's control group, a kill) may have stopped
        # it already: then a first stop from here is not a second one.
        not_stopping = not ready or worker.health().running
        for _ in range((2 if not_stopping else 1) if level >= 2 else int(not_stopping)):
            worker.stop()

    def samples(self) -> list[Family] | None:
        if self.registry is None:
            return None
        return [
            (
                m.name,
                m.type,
                m.documentation,
                [(s.name, tuple(sorted(s.labels.items())), float(s.value)) for s in m.samples],
            )
            for m in self.registry.collect()
        ]

    def report(self) -> None:
        """The reporter thread: ready, then health every REPORT_EVERY; stops from the pipe."""
        while True:
            wait = REPORT_EVERY if self.ready else READY_POLL
            try:
                incoming = self.conn.poll(wait)
                message = self.conn.recv() if incoming else None
            except (EOFError, OSError):
                log.warning("worker process %d: the supervisor is gone; stopping", os.getpid())
                self.stop(1)
                return
            if message is not None:
                if message[0] == "stop":
                    self.stop(int(message[1]))
                continue
            worker = self.worker
            if worker is None:
                continue
            health = worker.health()
            if not self.ready and health.running:
                with self.lock:
                    self.ready = True
                self.send("ready", worker.worker_id)
            if self.ready:
                self.send("health", health, self.samples())


def _build(factory: Callable[[], object]) -> Worker | AsyncWorker:
    made = factory()
    if not isinstance(made, Worker | AsyncWorker):
        name = getattr(factory, "__qualname__", repr(factory))
        raise TypeError(f"{name}() returned a {type(made).__name__}, not a Worker or AsyncWorker")
    return made


def child_main(factory: Callable[[], object], conn: Connection, metrics: bool) -> None:
    """The child's whole life: its exit code is 0 after a stop, else the failure's."""
    _own_process_group()
    child = _Child(conn, metrics)
    threading.Thread(target=child.report, name="alkstore-report", daemon=True).start()
    code = _run(child, factory)
    _exit_within(EXIT_WAIT, code)
    if code:
        sys.exit(code)


def _run(child: _Child, factory: Callable[[], object]) -> int:
    """Build and run the worker; the exit code."""
    try:
        worker = _build(factory)
        with child.lock:
            child.worker = worker
            stopped = child.stops
        if stopped:
            return 0
        own_handler_executor(worker)
        if isinstance(worker, AsyncWorker):
            asyncio.run(worker.run())
        else:
            worker.run()
        return 0
    except (Exception, SystemExit) as exc:
        if child.ready:
            log.exception("worker process %d: the worker failed", os.getpid())
            return 1
        message, code = one_line(exc)
        if not isinstance(exc, AlkstoreError) and getattr(exc, "code", None) is None:
            traceback.print_exc()  # the user's own code failed: its traceback helps
        child.send("failed", message, code)
        return code


def _exit_within(seconds: float, code: int) -> None:
    """End this process ``seconds`` from now if its exit has not ended it by then.

    The interpreter's exit joins the threads and the child processes left
    running (a factory's own, a process pool's: an exit after
    ``shutdown(wait=False)`` can hang there, cpython#83386); a stopped
    child must not keep its supervisor waiting on that for good.
    """

    def end() -> None:
        time.sleep(seconds)
        log.warning("worker process %d: not exited %gs after its worker stopped; ending it",
                    os.getpid(), seconds)  # fmt: skip
        with contextlib.suppress(Exception):
            for process in multiprocessing.active_children():
                process.kill()
            sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=end, name="alkstore-exit", daemon=True).start()
