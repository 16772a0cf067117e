"""The supervisor: one worker run from start to stop.

``run()`` builds the run's state and its parts -- a producer per queue
(``_producer``), the executor (``_executor``), heartbeats (``_heartbeats``),
the completer (``_completer``), the sweeps (``_maintenance``) and a
listener per engine -- watches them, and on ``stop()`` (any thread), a
signal, or the cancellation of ``run()`` itself, shuts down
(``_shutdown``).  One asyncio program serves both ``Worker`` (which drives
it with ``asyncio.run``) and ``AsyncWorker``; what differs between them is
the runner behind the queues' ports (``_port``, ``_store_port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Hashable, Sequence
from types import FrameType

from .._extras.instrument import installed
from ..tasks._periodic import Periodic
from . import _shutdown
from ._cancel import Cancels
from ._completer import Completer
from ._executor import Executor
from ._heartbeats import Heartbeats
from ._maintenance import Maintenance
from ._periodic import Scheduler
from ._port import Backend, FiringPort
from ._producer import Producer
from ._registry import Registry
from ._state import QueueBinding, QueueState, RunState, Settings, WorkerHealth
from ._throughput import Throughput

__all__ = ["Supervisor"]

log = logging.getLogger("alkstore_sa.worker")

SignalHandler = Callable[[int, FrameType | None], object] | int | None


class Supervisor:
    """Runs a worker once.  ``stop()`` may be called from any thread, before or during ``run()``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Reentrant: stop() may run from a signal handler on the thread holding it.
        self._lock = threading.RLock()
        self._stops = 0
        self._run: RunState | None = None  # the run under way, for stop() to reach its loop

    # -- control (any thread) ----------------------------------------------------

    def stop(self) -> None:
        """Ask the run to stop; a second call skips the rest of the shutdown grace."""
        with self._lock:
            self._stops += 1
            run = self._run
        if run is not None and not run.loop.is_closed():
            # RuntimeError: the loop closed in between, so the run is over.
            with contextlib.suppress(RuntimeError):
                run.loop.call_soon_threadsafe(self._apply_stop, run)

    @property
    def stop_requests(self) -> int:
        """How many times ``stop()`` was called (any thread)."""
        with self._lock:
            return self._stops

    def _apply_stop(self, run: RunState) -> None:
        stops = self.stop_requests
        if stops >= 1 and not run.stopping.is_set():
            log.info("worker %s stopping: no new claims", self.settings.worker_id)
            run.stopping.set()
            for qs in run.queues:
                qs.signal.set()
        if stops >= 2 and not run.abandoning.is_set():
            log.info("worker %s: second stop, abandoning in-flight jobs", self.settings.worker_id)
            run.abandoning.set()
            run.progress.set()

    # -- the run (on its event loop) ----------------------------------------------

    def health(self) -> WorkerHealth:
        """B5: the run's health now (any thread; a snapshot, never a lock on the loop)."""
        with self._lock:
            run = self._run
        if run is None:
            return WorkerHealth(False, 0, 0, None, False, 0)
        return WorkerHealth(
            running=not run.stopping.is_set(),
            busy=sum(qs.running() for qs in run.queues),
            stuck=len(run.stuck),
            last_claim_at=run.last_claim_at,
            listener_connected=run.listening >= run.listeners > 0,
            db_errors=run.db_errors,
        )

    async def run(
        self,
        queues: Sequence[QueueBinding],
        backend: Backend,
        periodic: Sequence[tuple[Periodic, FiringPort]] = (),
        registry: Registry | None = None,
    ) -> None:
        """Run until stopped; ``backend`` is closed when the run ends.

        ``periodic``: the schedules this worker fires (P1), each with the port
        of the queue it enqueues onto, in a task of their own.
        ``registry``: where the run registers itself while it runs (V1), in a
        task of its own; its rows are removed at the end of a graceful stop.

        Raises ``SchemaMissingError`` before claiming anything when a queue's
        tables are missing or older than the package (B5).
        """
        loop = asyncio.get_running_loop()
        try:
            if not self.stop_requests:  # stopped before it began: nothing to check
                for binding in queues:
                    await binding.port.check_schema()
        except BaseException:
            backend.close()
            raise
        run = RunState(self.settings, [QueueState(b) for b in queues], loop)
        run.observers = installed()
        with self._lock:
            self._run = run
        self._apply_stop(run)  # a stop() asked for before run()
        restore = self._install_signals(loop)
        completer = Completer(run)
        heartbeats = Heartbeats(run)
        executor = Executor(run, heartbeats, completer)
        cancels = Cancels(run, completer.reports)  # C1: told by the listener, or heartbeats
        heartbeats.on_gone = cancels.cancel
        executor.on_held = cancels.held
        throughput = Throughput(run)
        background = [
            loop.create_task(completer.run(), name="alkstore-completer"),
            loop.create_task(heartbeats.run(), name="alkstore-heartbeat"),
            loop.create_task(throughput.run(), name="alkstore-throughput"),
        ]
        if self.settings.sweep_interval is not None:
            sweeps = Maintenance(run).run(self.settings.sweep_interval)
            background.append(loop.create_task(sweeps, name="alkstore-sweeps"))
        if self.settings.vacuum_interval is not None:
            vacuums = Maintenance(run).vacuum(self.settings.vacuum_interval)
            background.append(loop.create_task(vacuums, name="alkstore-vacuum"))
        if registry is not None:
            background.append(loop.create_task(registry.run(), name="alkstore-registry"))
        if periodic:
            scheduler = Scheduler(run, periodic).run()
            background.append(loop.create_task(scheduler, name="alkstore-periodic"))
        listeners = [
            loop.create_task(listening, name="alkstore-listener")
            for listening in self._listeners(run, backend, cancels)
        ]
        run.listeners = len(listeners)
        producers = [
            loop.create_task(Producer(run, qs, executor).run(), name=f"alkstore-producer-{qs.name}")
            for qs in run.queues
        ]
        log.info(
            "worker %s started: %s (concurrency %d per queue, poll every %gs)",
            self.settings.worker_id,
            ", ".join(qs.name for qs in run.queues),
            self.settings.concurrency,
            self.settings.poll_interval,
        )
        crashed: BaseException | None = None
        try:
            crashed = await self._watch(run, [*producers, *background, *listeners])
            await asyncio.gather(*producers, return_exceptions=True)
            await _cancel(listeners)
            await _shutdown.drain(run, completer, producers)
            await throughput.flush()  # the last second's outcomes (W2)
            if registry is not None:
                await registry.remove()  # V1: a graceful stop leaves no row behind
        except BaseException:
            # run() itself was cancelled (or interrupted): no grace, but the
            # held jobs still go back at once rather than when their leases
            # lapse, and no handler task outlives run().
            await _shutdown.abort(run, completer, producers)
            raise
        finally:
            await _cancel(producers + listeners)
            for task in list(run.jobs):
                task.cancel()
            await _cancel(background)
            restore()
            with self._lock:
                self._run = None
            backend.close()
        if crashed is not None:
            raise crashed
        log.info("worker %s stopped", self.settings.worker_id)

    async def _watch(self, run: RunState, tasks: list[asyncio.Task[None]]) -> BaseException | None:
        """Wait for the stop; a part that ends first is a bug: stop, and return its error."""
        stopped = run.loop.create_task(run.stopping.wait())
        done, _ = await asyncio.wait({stopped, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for task in done - {stopped}:
            error = None if task.cancelled() else task.exception()
            if error is None and run.stopping.is_set():
                continue  # a producer that saw the stop first
            # A runtime task never ends on its own: stop cleanly and let run()
            # raise its error rather than idle half-dead.
            log.error("worker task %s ended unexpectedly", task.get_name(), exc_info=error)
            self.stop()
            self._apply_stop(run)
            return error
        return None

    def _listeners(
        self, run: RunState, backend: Backend, cancels: Cancels
    ) -> list[Coroutine[None, None, None]]:
        """One listener per group of ports (per engine, normally exactly one), on
        its queues' channels and their stores' control channels (C1)."""
        groups: dict[Hashable, list[QueueState]] = {}
        for qs in run.queues:
            groups.setdefault(qs.port.listen_group, []).append(qs)
        application_name = f"alkstore {self.settings.worker_id}"
        listeners = []
        for members in groups.values():
            by_channel = {qs.binding.core.address.channel: qs for qs in members}
            controls: dict[str, list[QueueState]] = {}  # per store (schema): C1
            for qs in members:
                controls.setdefault(qs.binding.core.address.control_channel, []).append(qs)

            def wake(
                channel: str,
                payload: str = "",
                by_channel: dict[str, QueueState] = by_channel,
                controls: dict[str, list[QueueState]] = controls,
            ) -> None:
                qs = by_channel.get(channel)
                if qs is not None:
                    qs.wake()
                elif channel in controls:
                    cancels.notified(payload, controls[channel])

            def listening(up: bool, members: list[QueueState] = members) -> None:
                run.listening += 1 if up else -1
                if up:
                    for qs in members:
                        # The database answers again (after an outage, a
                        # failover): a claim backoff ends now, not at its cap.
                        qs.answered = True
                        qs.wake()  # Q26: claim once LISTEN is established

            listeners.append(
                backend.listen(
                    members[0].port,
                    application_name,
                    [*controls, *by_channel],
                    wake,
                    listening,
                    run,
                )
            )
        return listeners

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """SIGTERM/SIGINT stop the worker, only when running on the main thread."""
        if (
            not self.settings.handle_signals
            or threading.current_thread() is not threading.main_thread()
        ):
            return lambda: None
        installed: list[tuple[signal.Signals, SignalHandler]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError, ValueError):  # not supported here
                continue
            installed.append((sig, previous))

        def restore() -> None:
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)

        return restore


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
