"""The demo's logging: quiet about its own deliberate outcomes, and never on the bar's line.

The receipts app retries greylisted mail and dead-letters unknown mailboxes
on purpose; each is a WARNING/ERROR line from the worker, some eighty per
run, which the final table already sums up.  Unless ``--verbose``, those
per-job lines of the demo's queue are dropped (everything else is shown).
On a terminal the progress bar is redrawn in place, so a log line written
while it is up is put on a line of its own: the bar's line is erased
first, and the bar redraws itself below at its next update.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from ._progress import Progress

__all__ = ["DemoLogHandler", "setup"]

# What the worker's per-job records carry (worker/_outcomes.py's ``extra``).
_PER_JOB = {"retried", "dead"}


class _DeliberateOutcomes(logging.Filter):
    def __init__(self, queue: str) -> None:
        super().__init__()
        self.queue = queue

    def filter(self, record: logging.LogRecord) -> bool:
        outcome = getattr(record, "alkstore_outcome", None)
        return not (outcome in _PER_JOB and getattr(record, "alkstore_queue", None) == self.queue)


class DemoLogHandler(logging.StreamHandler[TextIO]):
    """A stderr handler that clears a drawn progress bar's line before each record."""

    progress: Progress | None = None

    def emit(self, record: logging.LogRecord) -> None:
        progress = self.progress
        if progress is not None:
            progress.clear_line()
        super().emit(record)


def setup(level: str, queue: str, *, verbose: bool) -> DemoLogHandler:
    handler = DemoLogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if not verbose:
        handler.addFilter(_DeliberateOutcomes(queue))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return handler
