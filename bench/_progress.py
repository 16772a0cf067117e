"""A progress bar on stderr, no dependencies.

On a terminal it redraws one line at most ten times a second; elsewhere (CI
logs, pipes) it prints one line per finished case, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24


class Bar:
    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.started = time.perf_counter()
        self._drawn = 0.0
        self._draw(force=True)

    def advance(self, k: int = 1) -> None:
        self.done += k
        self._draw()

    def set(self, done: int) -> None:
        self.done = done
        self._draw()

    def _line(self, rate: float | None = None) -> str:
        elapsed = time.perf_counter() - self.started
        fill = min(_WIDTH, int(_WIDTH * self.done / self.total))
        if rate is None:
            rate = self.done / elapsed if elapsed > 0 else 0.0
        return (
            f"{self.label:<34} [{'#' * fill}{'.' * (_WIDTH - fill)}] "
            f"{self.done:>8,}/{self.total:<8,} {rate:>9,.0f}/s {elapsed:6.1f}s"
        )

    def _draw(self, force: bool = False) -> None:
        if not self.live:
            return
        now = time.perf_counter()
        if force or now - self._drawn >= 0.1:
            self._drawn = now
            self.stream.write("\r" + self._line())
            self.stream.flush()

    def close(self, note: str = "", rate: float | None = None) -> None:
        """Finish the line; ``rate`` replaces the bar's own when the case timed itself."""
        line = self._line(rate) + (f"  {note}" if note else "")
        self.stream.write(("\r" if self.live else "") + line + "\n")
        self.stream.flush()


def say(text: str) -> None:
    """A status line on stderr (setup steps, which have no count)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
