"""Helpers of the X1 tests: a supervisor subprocess whose stderr is read as it runs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import URL, Engine, text

from ..cli.test_cli import ROOT, _env
from ._x1_app import TABLE

RUNNING = re.compile(r"worker process (\d+) running as (\S+)")
# Fast settings: sub-second leases, short handlers; children inherit them.
FAST = {"X1_VT": "0.6", "X1_WORK": "0.02", "X1_CONCURRENCY": "2", "X1_GRACE": "5"}


class Supervised:
    """``alkstore worker ... --processes N`` (or a ``run_processes`` script) running."""

    def __init__(self, argv: list[str], url: URL, **env: str) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=_env(url, **{**FAST, **env}),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.out: list[str] = []
        self._cond = threading.Condition()
        for stream, into in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out)):
            threading.Thread(target=self._read, args=(stream, into), daemon=True).start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            with self._cond:
                into.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, found: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            exited = False
            while not (value := found()):
                left = deadline - time.monotonic()
                if left <= 0 or exited:
                    raise AssertionError(
                        f"not seen in {timeout}s (exit {self.proc.poll()}); stderr:\n"
                        + "\n".join(self.lines)
                    )
                exited = self.proc.poll() is not None  # one more look at its last lines
                self._cond.wait(min(left, 0.2))
            return value

    def running(self) -> dict[int, str]:
        """pid -> worker id of every child that said it runs (restarted ones included)."""
        return {int(m[1]): m[2] for line in self.lines if (m := RUNNING.search(line))}

    def wait_running(self, n: int, timeout: float = 60.0) -> dict[int, str]:
        return dict(self.wait_for(lambda: len(self.running()) >= n and self.running(), timeout))

    def served(self, what: str) -> str:
        prefix = f"serving {what} at "
        line = self.wait_for(lambda: next((s for s in self.out if s.startswith(prefix)), None))
        return str(line).removeprefix(prefix)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> tuple[int, float]:
        """Signal the supervisor; its exit code and how long it took to exit."""
        began = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the supervisor did not exit:\n" + self.text()) from None
        return code, time.monotonic() - began

    def text(self) -> str:
        time.sleep(0.1)  # the readers' last lines
        return "\n".join(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cli(url: URL, target: str, processes: int, *extra: str, **env: str) -> Supervised:
    argv = [sys.executable, "-m", "alkstore_sa.cli", "worker", target]
    return Supervised([*argv, "--processes", str(processes), *extra], url, **env)


def script(url: URL, factory: str, processes: int, **env: str) -> Supervised:
    """``run_processes`` from a script (logging on, so the test sees the children start)."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from alkstore_sa import WorkerStartError, run_processes\n"
        f"from tests.worker._x1_app import {factory}\n"
        "try:\n"
        f"    run_processes({factory}, processes={processes})\n"
        "except WorkerStartError as exc:\n"
        "    print(f'WorkerStartError {exc.code}: {exc.message}', file=sys.stderr)\n"
        "    sys.exit(3)\n"
    )
    return Supervised([sys.executable, "-c", code], url, **env)


def make_table(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(TABLE))


def runs(engine: Engine, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text(sql), params))
