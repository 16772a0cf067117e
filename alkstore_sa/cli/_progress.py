"""A one-line progress bar: redrawn in place on a terminal, periodic lines otherwise."""

from __future__ import annotations

import threading
import time
from typing import TextIO

__all__ = ["Progress"]

# Erase the line, then return to its start: the bar never leaves debris when
# it gets shorter (a rate dropping from 4 digits to 3).
_REDRAW = "\r\x1b[2K"


class Progress:
    """Draws ``label [#####-----] done/total  extra`` on ``stream``.

    On a TTY the line is redrawn at most every ``min_interval`` seconds; in a
    pipe or a CI log, where ``\\r`` would pile up, a plain line is written every
    ``line_interval`` seconds instead (and always for the final state).
    """

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO,
        *,
        width: int = 30,
        min_interval: float = 0.05,
        line_interval: float = 1.0,
    ) -> None:
        self.label = label
        self.total = max(total, 1)
        self.stream = stream
        self.width = width
        isatty = getattr(stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        self.fill, self.empty = ("█", "░") if encoding == "utf8" else ("#", "-")
        self.interval = min_interval if self.tty else line_interval
        self._last = float("-inf")
        self._drawn = False
        # The monitor thread draws, the worker's threads log (clear_line): one at a time.
        self._lock = threading.Lock()

    def render(self, done: int, extra: str = "") -> str:
        frac = min(max(done / self.total, 0.0), 1.0)
        filled = round(frac * self.width)
        bar = self.fill * filled + self.empty * (self.width - filled)
        text = f"{self.label} [{bar}] {done}/{self.total} {frac:4.0%}"
        return f"{text}  {extra}" if extra else text

    def update(self, done: int, extra: str = "", *, force: bool = False) -> None:
        with self._lock:
            self._update(done, extra, force)

    def _update(self, done: int, extra: str, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        line = self.render(done, extra)
        if self.tty:
            self.stream.write(_REDRAW + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._drawn = True

    def clear_line(self) -> None:
        """Erase the drawn bar so another line can take its place; the next
        ``update`` draws it again (a log line never shares the bar's line)."""
        with self._lock:
            if self.tty and self._drawn:
                self.stream.write(_REDRAW)
                self.stream.flush()
                self._drawn = False
                self._last = float("-inf")

    def close(self) -> None:
        """Leave the cursor on a fresh line after the bar."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn = False
