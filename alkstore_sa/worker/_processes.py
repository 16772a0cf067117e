"""X1: N worker processes under one supervisor (``run_processes``, ``alkstore worker --processes``).

One Python process runs its handlers and its event loop under one GIL:
about one core.  The supervisor starts N children with the ``spawn``
start method (a fresh interpreter each: no connection, engine or thread
crosses a fork), each building its own Worker from the factory, with its
own worker id (``host:pid:...``).  It forwards SIGTERM/SIGINT to every
child as a stop over its pipe (a second signal ends their grace, a third
kills them), restarts a child that dies (after 1 s, doubling to 30 s; a
child that ran 30 s starts again at 1 s), and stops everything, with the
child's one-line error, when a child fails at its first start (a bad
target, a missing schema): a mistake in the configuration is not retried.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any

from .._values import validate as v
from .._values.errors import WorkerStartError
from ._child import REPORT_EVERY, Family, child_main
from ._procinfo import ChildHealth, ProcessesHealth, SampleKey, check_factory, combine, flatten
from ._state import WorkerHealth

__all__ = ["ChildHealth", "ProcessSupervisor", "ProcessesHealth", "run_processes"]

log = logging.getLogger("alkstore_sa.worker")

BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
MAX_PROCESSES = 1024


@dataclass(eq=False)
class _Slot:
    index: int
    process: Any = None  # multiprocessing's SpawnProcess
    conn: Connection | None = None
    worker_id: str | None = None
    health: WorkerHealth | None = None
    samples: list[Family] | None = None
    reported_at: float | None = None
    started_at: float = 0.0
    ready: bool = False
    failure: tuple[str, int] | None = None
    starts: int = 0
    backoff: float = BACKOFF_FIRST
    restart_at: float | None = None
    restarts: int = 0
    alive: bool = False


class ProcessSupervisor:
    """Runs ``processes`` children of ``factory`` until ``stop()`` or a signal.

    ``health()`` and ``samples()`` may be read from any thread (the CLI's
    HTTP servers do); ``metrics``: the children count into a registry of
    their own and report it (needs the prometheus extra).
    """

    def __init__(self, factory: object, processes: int, *, metrics: bool = False) -> None:
        self._factory = check_factory(factory)
        self.processes = v.integer(processes, "processes", minimum=1)
        if self.processes > MAX_PROCESSES:
            raise ValueError(f"processes must be at most {MAX_PROCESSES}, got {processes}")
        self._metrics = metrics
        self._ctx = multiprocessing.get_context("spawn")
        # Reentrant: SIGTERM's handler calls stop() on the main thread, between
        # any two of its bytecodes -- also while run() holds this lock.
        self._lock = threading.RLock()
        self._slots = [_Slot(i) for i in range(self.processes)]
        self._stops = 0  # stop() calls so far (any thread, a signal handler)
        self._sent = 0  # the stop level the children were told
        self._running = False
        self._error: WorkerStartError | None = None
        self._all_ran = False  # every child was running once (logged then)
        self._retired: dict[SampleKey, float] = {}  # counters of children that died
        self._kinds: dict[str, tuple[str, str]] = {}  # family -> (type, help)

    # -- control (any thread) ----------------------------------------------------

    def stop(self) -> None:
        """Stop every child gracefully; a second call ends their grace, a third kills them."""
        with self._lock:
            self._stops += 1

    def health(self) -> ProcessesHealth:
        now = time.monotonic()
        with self._lock:
            children = tuple(
                ChildHealth(
                    s.index,
                    s.process.pid if s.process is not None else None,
                    s.worker_id,
                    s.alive,
                    s.health,
                    None if s.reported_at is None else now - s.reported_at,
                    s.restarts,
                )
                for s in self._slots
            )
            return ProcessesHealth(self._running and not self._stops, self.processes, children)

    def samples(self) -> tuple[dict[SampleKey, float], dict[str, tuple[str, str]]]:
        """The children's metric samples summed (the dead ones' last counts included),
        and each family's (type, help)."""
        with self._lock:
            total = dict(self._retired)
            for s in self._slots:
                for key, value in flatten(s.samples):
                    total[key] = combine(key, total.get(key), value)
            return total, dict(self._kinds)

    # -- the run (the calling thread) --------------------------------------------

    def run(self) -> None:
        """Block until every child has stopped; raise ``WorkerStartError`` if one failed
        at its first start."""
        restore = _install_signals(self.stop)
        self._running = True
        try:
            for slot in self._slots:
                self._start(slot)
            while any(s.alive for s in self._slots) or not self._stopping():
                self._forward_stops()
                self._step()
        finally:
            self._running = False
            for slot in self._slots:
                if slot.alive:  # only when run() itself is interrupted
                    slot.process.kill()
                    slot.process.join()
            restore()
        if self._error is not None:
            raise self._error
        log.info("all %d worker processes stopped", self.processes)

    def _stopping(self) -> bool:
        with self._lock:
            return self._stops > 0

    def _start(self, slot: _Slot) -> None:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=child_main,
            args=(self._factory, child, self._metrics),
            name=f"alkstore-worker-{slot.index}",
        )
        process.start()
        child.close()  # ours closed: the pipe ends (EOFError) when the child exits
        with self._lock:
            slot.process, slot.conn, slot.alive = process, parent, True
            slot.worker_id, slot.health, slot.samples, slot.reported_at = None, None, None, None
            slot.ready, slot.failure, slot.restart_at = False, None, None
            slot.started_at = time.monotonic()
            slot.starts += 1
        log.debug("worker process %d started (process %d of %d)", process.pid, slot.index + 1,
                 self.processes)  # fmt: skip

    def _forward_stops(self) -> None:
        with self._lock:
            level = self._stops
        if level <= self._sent:
            return
        self._sent = level
        if level == 1 and self._error is None:  # a failure at start: its error says it all
            log.info("stopping %d worker processes gracefully", self.processes)
        for slot in self._slots:
            slot.restart_at = None
            if not slot.alive:
                continue
            if level >= 3:
                log.warning("third stop: killing worker process %d", slot.process.pid)
                slot.process.kill()
            elif slot.conn is not None:
                # OSError: it is exiting; its sentinel says so next.
                with contextlib.suppress(OSError):
                    slot.conn.send(("stop", level))

    def _step(self) -> None:
        now = time.monotonic()
        due = [s.restart_at for s in self._slots if s.restart_at is not None]
        timeout = max(0.0, min([REPORT_EVERY, *(d - now for d in due)]))
        live = [s for s in self._slots if s.alive]
        waitables: list[Any] = [s.process.sentinel for s in live]
        waitables += [s.conn for s in live if s.conn is not None]
        ready = set(wait(waitables, timeout)) if waitables else _sleep(timeout)
        for slot in live:
            if slot.conn is not None and slot.conn in ready:
                self._receive(slot)
        for slot in live:
            if slot.process.sentinel in ready:
                self._exited(slot)
        now = time.monotonic()
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now and not self._stopping():
                self._start(slot)

    def _receive(self, slot: _Slot) -> None:
        assert slot.conn is not None
        try:
            while slot.conn.poll():
                self._handle(slot, slot.conn.recv())
        except (EOFError, OSError):
            slot.conn.close()
            slot.conn = None  # it is exiting; its sentinel tells when it is gone

    def _handle(self, slot: _Slot, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            with self._lock:
                slot.ready, slot.worker_id = True, message[1]
                slot.reported_at = time.monotonic()
            others = [s for s in self._slots if s is not slot and s.alive and s.ready]
            if any(s.worker_id == slot.worker_id for s in others):
                self._fail(slot, f"two worker processes have the worker id {slot.worker_id!r}: "
                           "leave worker_id to its default (host:pid:...) or make it differ "
                           "per process", 2)  # fmt: skip
            else:
                log.info("worker process %d running as %s", slot.process.pid, slot.worker_id)
                if not self._all_ran and all(s.ready for s in self._slots):
                    self._all_ran = True
                    log.info("all %d worker processes running", self.processes)
        elif kind == "health":
            with self._lock:
                slot.health, slot.samples = message[1], message[2]
                slot.reported_at = time.monotonic()
                for name, typ, doc, _ in message[2] or ():
                    self._kinds.setdefault(name, (typ, doc))
        elif kind == "failed":
            slot.failure = (str(message[1]), int(message[2]))

    def _fail(self, slot: _Slot, message: str, code: int) -> None:
        if self._error is None:
            self._error = WorkerStartError(message, code=code, pid=slot.process.pid)
        self.stop()

    def _exited(self, slot: _Slot) -> None:
        process = slot.process
        process.join()
        if slot.conn is not None:
            self._receive(slot)  # a last message (its failure) before the pipe closed
        with self._lock:
            slot.alive = False
            for key, value in flatten(slot.samples):
                if not key[1].endswith("_created"):
                    self._retired[key] = self._retired.get(key, 0.0) + value
            slot.samples = None
        if slot.conn is not None:
            slot.conn.close()
            slot.conn = None
        code = process.exitcode
        if self._stopping():
            if code and self._error is None:
                log.warning("worker process %d exited with %s at the stop", process.pid,
                            _describe(code))  # fmt: skip
            return
        if slot.failure is None and not slot.ready and code is not None and code > 0:
            # It exited before child_main could say why (an import failing as
            # the spawned interpreter unpickles the factory): its traceback is
            # on stderr already.
            slot.failure = (f"worker process exited with code {code} before its worker "
                            "started (its traceback is above)", code)  # fmt: skip
        if slot.failure is not None and not slot.ready:
            if slot.starts == 1:
                self._fail(slot, *slot.failure)
                return
            log.error("restarted worker process %d failed at start: %s", process.pid,
                      slot.failure[0])  # fmt: skip
        ran = time.monotonic() - slot.started_at
        delay, slot.backoff = restart_delay(slot.backoff, ran)
        slot.restart_at = time.monotonic() + delay
        slot.restarts += 1
        log.error("worker process %d %s after %.1f s; restarting it in %g s", process.pid,
                  _describe(code), ran, delay)  # fmt: skip


def restart_delay(backoff: float, ran: float) -> tuple[float, float]:
    """How long to wait before restarting a child that died after ``ran`` seconds, and
    the backoff for its next death: 1 s, doubling to 30 s while it keeps dying; a child
    that ran 30 s or more had recovered, and starts again from 1 s."""
    if ran >= BACKOFF_MAX:
        backoff = BACKOFF_FIRST
    return backoff, min(BACKOFF_MAX, backoff * 2)


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"died of {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with code {code}"


def _sleep(seconds: float) -> set[Any]:
    time.sleep(seconds)
    return set()


def _install_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT call ``stop``, when on the main thread (else the caller stops us)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def run_processes(factory: Callable[[], object], processes: int | None = None) -> None:
    """X1: run ``processes`` (default: one per CPU) worker processes until SIGTERM/SIGINT.

    ``factory`` is a function defined at the top level of a module that
    returns a ``Worker`` or ``AsyncWorker``; each process (started with
    ``spawn``) imports it and builds its own worker, engine and
    connections.  A signal stops every process gracefully and then this
    returns; a process that dies is restarted (1 s backoff doubling to
    30 s); one that fails at its first start raises ``WorkerStartError``
    with its one-line error after stopping the others.  Call it under
    ``if __name__ == "__main__":`` in a script (spawn re-imports it).
    """
    count = (os.cpu_count() or 1) if processes is None else processes
    ProcessSupervisor(factory, count).run()
