"""V4: the worker's log records are bounded, whatever a handler's exception carries.

A handler whose exception echoes a 50 MiB argument (the reproduction in the
issue wrote 262 MB of log over 5 attempts) writes, per attempt, one record
whose message and traceback are each cut to 8,000 characters -- through the
standard formatter and through the documented JSON recipe's
``formatException`` alike, since the record's ``exc_info`` itself formats
small.  The error history keeps a traceback of at most 8,000 characters too.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import Job, QueueOpts, Store
from alkstore_sa.worker._bounded import MAX_CHARS, bounded, cut

from .._workers import KINDS, handler, start_worker, wait_for, worker_class

BIG = 50 * 1024 * 1024  # the argument the exception echoes: 50 MiB
ATTEMPTS = 3


class _Counting(io.TextIOBase):
    """A stream that keeps only how many characters were written to it."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, s: str) -> int:
        self.chars += len(s)
        return len(s)


class _FormatException(logging.Formatter):
    """The documented JSON recipe's way: ``formatException(record.exc_info)``."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _echoing(job: Job) -> None:
    argument = "x" * BIG
    raise ValueError(f"cannot charge {argument!r}")


@pytest.mark.parametrize("kind", KINDS)
def test_v4_a_50_mib_exception_message_writes_a_bounded_log_over_several_attempts(
    kind: str, database_url: URL, store: Store
) -> None:
    streams = [_Counting(), _Counting()]
    handlers = [logging.StreamHandler(stream) for stream in streams]
    handlers[0].setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers[1].setFormatter(_FormatException())
    root = logging.getLogger("alkstore_sa")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    for h in (*handlers, keep):
        root.addHandler(h)
    root.setLevel(logging.INFO)
    # Retries due at once (d = 0.5 s: delays drawn from [0, 0]).
    opts = QueueOpts(max_attempts=ATTEMPTS, retry_base=0.5, retry_cap=0.5)
    job_id = store.queue("v4", opts).enqueue(b"order")
    running = start_worker(
        kind,
        database_url,
        lambda s: worker_class(kind)({s.queue("v4", opts): handler(kind, _echoing)}),
    )
    try:
        wait_for(lambda: store.queue("v4").get_job(job_id).status == "dead", timeout=60)
    finally:
        running.stop()
        for h in (*handlers, keep):
            root.removeHandler(h)
        root.setLevel(logging.NOTSET)
    mine = [r for r in records if getattr(r, "alkstore_job_id", None) == job_id]
    assert [r.alkstore_outcome for r in mine] == ["retried"] * (ATTEMPTS - 1) + ["dead"]
    for record in mine:
        assert len(record.getMessage()) <= MAX_CHARS
        assert record.exc_info is not None and record.exc_info[0] is ValueError
        assert len(logging.Formatter().formatException(record.exc_info)) <= MAX_CHARS
    # The whole run's log: a few records of at most 2 x 8,000 characters each.
    for stream in streams:
        assert stream.chars <= 2 * MAX_CHARS * ATTEMPTS + 10_000, stream.chars
    dead = store.queue("v4").get_job(job_id)
    assert dead is not None and dead.last_error is not None
    assert len(dead.last_error) <= MAX_CHARS


def _deep(n: int) -> None:
    if n:
        _deep(n - 1)
    raise KeyError("k" * 100_000)


def test_v4_a_deep_chained_traceback_formats_within_the_bound() -> None:
    try:
        try:
            _deep(300)
        except KeyError as inner:
            raise RuntimeError("wrapped " + "y" * 20_000) from inner
    except RuntimeError as exc:
        trace = bounded(exc)
    assert len(trace.text) <= MAX_CHARS
    assert trace.text.startswith("Traceback (most recent call last):")
    assert "RuntimeError: wrapped yyy" in trace.text
    assert trace.exc_info[0] is RuntimeError
    assert len(logging.Formatter().formatException(trace.exc_info)) <= MAX_CHARS


def test_v4_a_small_exception_is_logged_as_it_is() -> None:
    try:
        raise ValueError("bad payload")
    except ValueError as exc:
        trace = bounded(exc)
        caught: Any = exc
    assert trace.exc_info[1] is caught  # nothing to cut: the exception itself
    assert trace.text.endswith("ValueError: bad payload\n")
    assert cut("z" * 10) == "z" * 10
    assert len(cut("z" * 9000)) == MAX_CHARS
