"""One claim of one job as calls: ack, retry, fail, snooze, heartbeat, each at most once."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Connection

from .._db import ops as _ops
from .._values import validate as v
from .._values.errors import HandleSpentError
from .._values.job import Job
from .._values.stamps import as_interval, backoff_delay
from . import Call
from .core import QueueCore

__all__ = ["HandleCore"]

T = TypeVar("T")


class HandleCore:
    """One claim of one job: its identity (id, attempts) and its one-shot state."""

    __slots__ = ("_lock", "_spent", "job", "queue")

    def __init__(self, queue: QueueCore, job: Job) -> None:
        self.queue = queue
        self.job = job
        self._spent = False
        self._lock = threading.Lock()

    @property
    def spent(self) -> bool:
        return self._spent

    def _check_unspent(self) -> None:
        if self._spent:
            raise HandleSpentError(
                f"job {self.job.id}: this handle already acked, retried, failed or snoozed"
            )

    def _consuming(self, op: Call[T]) -> Call[T]:
        """Q20: the call consumes the handle as it reaches the database."""

        def run(conn: Connection) -> T:
            with self._lock:
                self._check_unspent()
                self._spent = True
            try:
                return op(conn)
            except BaseException:
                # It returned nothing (a connection cut, a statement error), so
                # the caller may call again (Q30): safe, as each terminal
                # statement is guarded by the claim, so repeating one that did
                # commit finds the claim gone and returns False.
                with self._lock:
                    self._spent = False
                raise

        return run

    def _identity(self) -> dict[str, Any]:
        return {"address": self.queue.address, "job_id": self.job.id, "attempts": self.job.attempts}

    def ack(self, result: object = None) -> Call[bool]:
        """Q16; R1: a job stamped with keep_completed is kept with ``result``.

        ``result`` (bytes-like or None) is checked before SQL; a job without
        the stamp ignores it and is acked by the statement it always was.
        """
        data = None if result is None else v.payload(result, "result")
        self._check_unspent()
        job = self.job
        kept = job.keep_completed is not None
        return self._consuming(self.queue.ack_claim(job.id, job.attempts, kept=kept, result=data))

    def retry(
        self, error: object, delay: object, *, traceback: str | None = None
    ) -> Call[_ops.Retried | None]:
        """Q17/Q18; the call says ``"retried"`` or ``"dead"``, None when the claim is gone.

        ``traceback`` (the Worker's, B2) goes into the job's error history.
        """
        text = v.error_text(error)
        if delay is None:
            seconds: float = backoff_delay(self.queue.opts, self.job.attempts)
        else:
            seconds = v.duration(delay, "delay", allow_zero=True)
        self._check_unspent()
        job = self.job
        return self._consuming(
            self.queue.retry_claim(job.id, job.attempts, text, seconds, traceback)
        )

    def fail(self, error: object, *, traceback: str | None = None) -> Call[bool]:
        text = v.error_text(error)
        self._check_unspent()
        job = self.job
        return self._consuming(self.queue.fail_claim(job.id, job.attempts, text, traceback))

    def snooze(self, delay: object) -> Call[bool]:
        """Z1: one-shot like ack/retry/fail (Q20); ``delay`` >= 0 checked before SQL."""
        seconds = v.duration(delay, "delay", allow_zero=True)
        self._check_unspent()
        job = self.job
        return self._consuming(self.queue.snooze_claim(job.id, job.attempts, seconds))

    def heartbeat(self, extend: object) -> Call[bool] | None:
        """``None`` when spent: the face returns ``False`` without SQL (Q20)."""
        seconds = v.duration(extend, "extend")
        if self._spent:
            return None
        return partial(_ops.heartbeat, **self._identity(), extend=as_interval(seconds))
