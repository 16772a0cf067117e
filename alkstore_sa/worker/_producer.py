"""The producer: one per queue, claims as many jobs as the queue has free slots.

When it claims (Q26):

- at once on a wake (a notification, the listener coming up) while the
  queue is believed empty: a new job never waits;
- for a backlog (the last claim came back full, so wakes add nothing), when
  every slot is free or once a free slot has waited about one claim round
  trip (``settle``, a moving average capped at ``SETTLE_CAP``): fast
  handlers get full claims -- one round trip and one plan per
  ``concurrency`` jobs -- and slow ones keep busy;
- while the queue's handlers are short (``QueueState.ahead``), one
  batch ahead of the free slots, sent the moment the previous one has all
  started;
- when a job it knows of comes due (``QueueState.next_due``: its own
  retries, V5), so a retry runs on time rather than a poll later;
- on the re-poll timer (``poll_interval``), which covers lost notifications
  and delayed jobs it was not told about.

A failed claim is logged and retried: the first time after ``RETRY_FIRST``
(the usual lone failure is a pooled connection the server or a proxy
ended, and the pool has dropped it: the retry goes out on a fresh one, so
a connection killed as a fault ends costs no poll interval), then after a
delay that doubles with each failure in a row, from ``poll_interval`` up to
``BACKOFF_CAP`` (B5); wakes
do not cut it short, so a database outage (or tables dropped mid-run) is
never a busy loop, and never silent.  The database answering again does
(``QueueState.answered``): the listener's LISTEN (re)established (a
restart, a failover to a promoted standby), or any other call of the run
succeeding after failures (``RunState.db_ok``) -- a backoff grown during
the fault would otherwise idle the worker for up to ``BACKOFF_CAP`` after
it ended (seen as a second-long claim latency tail once backend kills
stopped).  The next claim then goes out at once and the backoff restarts
from its floor; a backoff is cut short at most once a ``poll_interval``,
so a queue whose claims still fail while other calls succeed polls at
its floor and never spins.

A claim gets ``CLAIM_TIMEOUT`` seconds for its reply.  A peer that went
silent without a reset (a blackholed path, a frozen server) would
otherwise hold the producer -- and, on a ``Worker``, the claim thread --
forever: TCP keepalives only end such a wait when the path drops packets,
not when something in it still acknowledges them.  The claim is then
abandoned (its connection broken and discarded) and counts as a failed
claim.  If the server did run it, its jobs are claimed by nobody who
knows: they lapse after their visibility timeout and are claimed again,
never run twice by this worker.  The default is the default visibility
timeout: a reply later than that would hand out jobs whose claims had
lapsed already.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from datetime import UTC, datetime

from .._extras.instrument import notify
from .._values.job import Job
from ._early_start import EarlyStart
from ._executor import Executor
from ._state import QueueState, RunState, reraise_if_cancelled, wait_until

__all__ = ["BACKOFF_CAP", "CLAIM_TIMEOUT", "SETTLE_CAP", "Producer"]

log = logging.getLogger("alkstore_sa.worker")

SETTLE_CAP = 0.05  # a backlog's free slot never waits longer than this for company
BACKOFF_CAP = 30.0  # the longest wait between claims while they fail (B5)
RETRY_FIRST = 0.05  # the wait after a first failed claim (then poll_interval, doubling)
CLAIM_TIMEOUT = 30.0  # seconds a claim waits for its reply before it is abandoned
ABORT_WAIT = 5.0  # how long an abandoned claim gets to end once its connection is broken
RATE_WAIT_FLOOR = 0.001  # F4: a rate wait of 0 still waits a moment (no claim spin)


class Producer:
    def __init__(self, run: RunState, qs: QueueState, executor: Executor) -> None:
        self._run = run
        self._qs = qs
        self._executor = executor
        self._failures = 0  # claims failed in a row: the backoff's exponent
        self._unreported = 0  # failures since the last claim that worked (for its log line)
        self._backoff_until = -math.inf  # loop time before which no claim is tried
        self._cut_at = -math.inf  # when the last backoff was cut short by an answer

    async def run(self) -> None:
        """Claim until the run stops."""
        loop = self._run.loop
        qs = self._qs
        concurrency = self._run.settings.concurrency
        poll_interval = self._run.settings.poll_interval
        next_poll = loop.time() + poll_interval
        while not self._run.stopping.is_set():
            now = loop.time()
            # Free slots, plus the batch a queue of short handlers claims ahead.
            free = concurrency + qs.ahead - qs.busy - qs.claiming - len(qs.ready)
            settle_at = next_poll
            if qs.answered:
                qs.answered = False
                self._failures = 0  # the next failure waits the floor again (still reported)
                if now < self._backoff_until:
                    # At once -- but at most once a poll interval: a queue whose
                    # claims keep failing while other calls succeed polls at its
                    # floor, it never spins on their successes.
                    cut = max(now, self._cut_at + poll_interval)
                    self._backoff_until = min(self._backoff_until, cut)
                    self._cut_at = self._backoff_until
            if now < self._backoff_until:
                settle_at = next_poll = self._backoff_until
            elif free > 0 and not qs.claiming and (qs.woken or qs.backlog):
                prompt = qs.woken and not qs.backlog
                if qs.ahead > 0:
                    # Claiming ahead: jobs waiting in ready fill each freed
                    # slot at once, so no slot waits; the next batch goes out
                    # when they have all started, while the handlers still run.
                    go = prompt or not qs.ready
                else:
                    settle_at = qs.free_since + qs.settle
                    go = prompt or free >= concurrency or now >= settle_at
                if go:
                    qs.woken = qs.backlog = False
                    qs.claiming = free
                    qs.free_since = math.inf
                    # Inline, not a task: one claim at a time, and a wake's
                    # claim goes out in this very loop pass (Q26 latency).
                    await self._claim(free)
                    next_poll = loop.time() + poll_interval
                    continue
            if qs.came_due(now):
                qs.woken = True  # V5: a job it knows of is due now
                continue
            if next_poll <= now:
                qs.woken = True  # the re-poll (Q26)
                next_poll = now + poll_interval
                continue
            qs.signal.clear()
            await wait_until(qs.signal, min(next_poll, settle_at, qs.next_due))

    async def _claim(self, n: int) -> None:
        qs = self._qs
        loop = self._run.loop
        started = loop.time()
        early = self._executor.early_start(qs, n)
        try:
            jobs = await self._bounded_claim(n, early)
            took = min(loop.time() - started, SETTLE_CAP)
            qs.settle += (took - qs.settle) / 4  # a moving average of the claim's round trip
        except Exception as exc:
            reraise_if_cancelled(exc)
            self._failed(exc)
            jobs = []
        else:
            self._succeeded()
        finally:
            qs.claiming -= n
            # Handlers started where the reply landed run whatever became of
            # the wait for it (abandoned late, cancelled): they are held like any.
            begun = [] if early is None else early.close()
            for slot in begun:
                self._executor.adopt(qs, slot)
        wait = qs.binding.core.flow.rate_wait
        if wait is not None and len(jobs) < n:
            # F4: held back by the queue's rate or a group's: claim again when it allows one
            # (V5's due timer), not before -- and not only at the next re-poll.
            qs.due(started + max(wait, RATE_WAIT_FLOOR))
        if jobs:
            for observer in self._run.observers:
                notify(functools.partial(observer.claimed, qs.name, jobs), "claimed")
        for job in jobs[len(begun) :]:  # ``early`` started the first of them
            self._executor.start(qs, job)
        if len(jobs) == n or (jobs and self._run.settings.max_batch_payload_bytes is not None):
            # A full batch: there may be more.  Under a byte bound a short
            # batch may have been cut by the bound, not by the queue running
            # dry: claim again as slots free up (an empty claim ends it).
            qs.backlog = True
        qs.signal.set()

    async def _bounded_claim(self, n: int, early: EarlyStart | None) -> list[Job]:
        """The port's claim, abandoned after ``CLAIM_TIMEOUT`` (``TimeoutError``).

        Abandoned by breaking its connection (``abort_claim``), so the claim
        ends at once with a connection error wherever it waits (a thread, a
        driver's cancel path); cancelled only if even that does not end it.
        Awaited in this task, under one timer: a task of its own and a wait
        on it would cost the wake path two loop passes (L1).
        """
        settings = self._run.settings
        port = self._qs.port
        loop = self._run.loop
        abandoned = False
        timer: asyncio.TimerHandle | None = None
        try:
            async with asyncio.timeout(None) as bound:

                def abandon() -> None:
                    nonlocal abandoned
                    abandoned = True
                    port.abort_claim()
                    bound.reschedule(loop.time() + ABORT_WAIT)

                timer = loop.call_later(CLAIM_TIMEOUT, abandon)
                return await port.claim(
                    settings.worker_id, n, settings.max_batch_payload_bytes, on_reply=early
                )
        except Exception as exc:
            # After the abandon: the broken connection's error, or the
            # timeout's when even that did not end it.  A reply that came in
            # the meantime was returned above.
            if abandoned:
                why = f"no reply within {CLAIM_TIMEOUT:g}s; connection dropped"
                raise TimeoutError(why) from exc
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _failed(self, exc: Exception) -> None:
        self._run.db_failed()
        self._failures += 1
        self._unreported += 1
        if self._failures == 1:
            wait = RETRY_FIRST
        else:
            wait = min(self._run.settings.poll_interval * 2 ** (self._failures - 2), BACKOFF_CAP)
        self._backoff_until = self._run.loop.time() + wait
        log.warning(
            "claim on %s failed (%d in a row): %s; next try in %gs",
            self._qs.name,
            self._unreported,
            exc,
            wait,
            extra={"alkstore_queue": self._qs.name},
        )

    def _succeeded(self) -> None:
        self._run.db_ok()
        self._run.last_claim_at = datetime.now(UTC)
        if self._unreported:
            log.info(
                "claims on %s work again after %d failure(s)",
                self._qs.name,
                self._unreported,
                extra={"alkstore_queue": self._qs.name},
            )
            self._unreported = 0
            self._failures = 0
            self._backoff_until = -math.inf
