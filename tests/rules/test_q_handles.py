"""Q14-Q21: job handles -- validity, heartbeat, ack, retry, fail, one-shot, dead rows."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import AsyncSession as AsyncOrmSession
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, HandleSpentError, QueueOpts, Store, StoreClosedError
from alkstore_sa._values.stamps import backoff_delay

from .._qtools import db_now, dead_row, expire, handle_core, lapse, live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of


def _claim(q: Any, n: int, worker: str = "w") -> list[Any]:
    q.enqueue_many([b"%d" % i for i in range(n)])
    handles: list[Any] = q.claim_batch(worker, n)
    assert len(handles) == n
    return handles


def _snapshot(engine: Engine, job_id: int) -> Any:
    return live_row(engine, job_id)


# -- Q14 -----------------------------------------------------------------------


def test_q14_a_valid_handle_may_act(qs: Any) -> None:
    q = qs.queue("q14")
    acked, retried, failed = _claim(q, 3)
    assert acked.heartbeat(10) is True
    assert acked.ack() is True
    assert retried.retry("again", delay=0) is True
    assert failed.fail("no") is True


def test_q14_a_lapsed_handle_refuses_every_op_without_raising(qs: Any, engine: Engine) -> None:
    q = qs.queue("q14")
    handles = _claim(q, 3)
    lapse(engine, *(h.id for h in handles))
    before = {h.id: _snapshot(engine, h.id) for h in handles}
    a, b, c = handles
    assert [h.heartbeat(60) for h in handles] == [False] * 3
    assert a.ack() is False
    assert b.retry("late", delay=0) is False
    assert c.fail("late") is False
    assert {h.id: _snapshot(engine, h.id) for h in handles} == before  # nothing changed
    assert dead_row(engine, c.id) is None


def test_q14_a_stale_handle_after_a_reclaim_by_the_same_worker_refuses_every_op(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q14")
    old = _claim(q, 3, worker="same")
    lapse(engine, *(h.id for h in old))
    new = {h.id: h for h in q.claim_batch("same", 3)}
    assert sorted(new) == sorted(h.id for h in old)
    assert all(h.job.worker_id == "same" and h.job.attempts == 2 for h in new.values())
    before = {i: _snapshot(engine, i) for i in new}
    a, b, c = old
    assert [h.heartbeat(60) for h in old] == [False] * 3
    assert a.ack() is False
    assert b.retry("stale", delay=0) is False
    assert c.fail("stale") is False
    assert {i: _snapshot(engine, i) for i in new} == before
    # The current claims are untouched and still act.
    assert new[a.id].heartbeat(5) is True
    assert new[a.id].ack() is True
    assert new[b.id].retry(delay=0) is True
    assert new[c.id].fail() is True


def test_q14_a_handle_refuses_once_its_row_is_cancelled_swept_or_batch_acked(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q14")
    cancelled, swept, batched = _claim(q, 3)
    assert q.cancel(cancelled.id) is True
    expire(engine, swept.id)
    assert q.sweep_expired().expired == 1
    assert q.ack_batch([batched.id]) == 1
    for h in (cancelled, swept, batched):
        assert h.heartbeat(5) is False
    assert cancelled.ack() is False
    assert swept.retry() is False
    assert batched.fail() is False


# -- Q15 -----------------------------------------------------------------------


def _deadline(engine: Engine, job_id: int) -> Any:
    row = live_row(engine, job_id)
    assert row is not None
    return row["claim_deadline"]


def test_q15_heartbeat_is_an_absolute_reset_not_additive(qs: Any, engine: Engine) -> None:
    q = qs.queue("q15", QueueOpts(visibility_timeout=30))
    (h,) = _claim(q, 1)
    for extend in (300, 1, timedelta(milliseconds=500), 45.25):
        seconds = extend.total_seconds() if isinstance(extend, timedelta) else extend
        before = db_now(engine)
        assert h.heartbeat(extend) is True
        after = db_now(engine)
        span = timedelta(seconds=seconds)
        assert before + span <= _deadline(engine, h.id) <= after + span, extend


def test_q15_heartbeat_is_repeatable_and_keeps_the_claim(qs: Any, engine: Engine) -> None:
    q = qs.queue("q15", QueueOpts(visibility_timeout=1))
    (h,) = _claim(q, 1)
    for _ in range(5):
        assert h.heartbeat(120) is True
    lapse(engine, h.id, ago=-60)  # the deadline is still a minute away
    assert q.claim_one("thief") is None
    assert h.ack() is True


def test_q15_heartbeat_is_refused_once_lapsed_and_does_not_resurrect(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("q15")
    (h,) = _claim(q, 1)
    lapse(engine, h.id)
    deadline = _deadline(engine, h.id)
    assert h.heartbeat(600) is False
    assert _deadline(engine, h.id) == deadline
    taken = q.claim_one("other")
    assert taken is not None and taken.id == h.id and taken.job.attempts == 2
    assert h.heartbeat(600) is False


# -- Q16 -----------------------------------------------------------------------


def test_q16_ack_deletes_the_row(qs: Any, engine: Engine) -> None:
    q = qs.queue("q16")
    (h,) = _claim(q, 1)
    assert h.ack() is True
    assert live_row(engine, h.id) is None and dead_row(engine, h.id) is None
    assert q.get_job(h.id) is None


def _side_table(engine: Engine) -> None:
    sql(engine, "CREATE TABLE public.side (v text)")


def _side_rows(engine: Engine) -> list[str]:
    return [r["v"] for r in sql(engine, "SELECT v FROM public.side")]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
@pytest.mark.parametrize("kind", ["session", "connection"])
def test_q16_ack_in_the_callers_transaction_commits_or_rolls_back_with_the_work(
    store: Store, engine: Engine, outcome: str, kind: str
) -> None:
    _side_table(engine)
    q = store.queue("q16")
    (h,) = _claim(q, 1)
    with Session(engine) if kind == "session" else engine.connect() as s:
        s.execute(text("INSERT INTO public.side VALUES ('work')"))
        assert h.ack(session=s) is True
        assert live_row(engine, h.id) is not None  # not committed yet
        getattr(s, outcome)()
    if outcome == "commit":
        assert _side_rows(engine) == ["work"] and live_row(engine, h.id) is None
    else:
        assert _side_rows(engine) == [] and live_row(engine, h.id)["status"] == "processing"
        with pytest.raises(HandleSpentError):  # Q20: it reached the database
            h.ack()


def test_q16_ack_of_a_lost_claim_in_a_session_returns_false(store: Store, engine: Engine) -> None:
    q = store.queue("q16")
    (h,) = _claim(q, 1)
    lapse(engine, h.id)
    with Session(engine) as s:
        assert h.ack(session=s) is False
        s.commit()
    assert live_row(engine, h.id) is not None


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
@pytest.mark.parametrize("kind", ["session", "connection"])
async def test_q16_async_ack_in_the_callers_transaction(
    async_engine: AsyncEngine, engine: Engine, outcome: str, kind: str
) -> None:
    _side_table(engine)
    q = AsyncStore(async_engine).queue("q16")
    await q.enqueue(b"x")
    h = await q.claim_one("w")
    assert h is not None
    async with AsyncOrmSession(async_engine) if kind == "session" else async_engine.connect() as s:
        await s.execute(text("INSERT INTO public.side VALUES ('work')"))
        assert await h.ack(session=s) is True
        await getattr(s, outcome)()
    kept = outcome == "commit"
    assert _side_rows(engine) == (["work"] if kept else [])
    assert (live_row(engine, h.id) is None) is kept


# -- Q17 -----------------------------------------------------------------------


def _delays(q: Any, engine: Engine, handles: list[Any], **retry: Any) -> list[float]:
    """Retry each handle and read back the delay it was given.

    ``run_at = t + delay`` with ``t`` the retry statement's time, read between
    ``before`` and the next clock read, so ``run_at - before`` is the delay
    plus a few milliseconds: whole-second delays come back by flooring.
    """
    out = []
    for h in handles:
        before = db_now(engine)
        assert h.retry(**retry) is True
        row = live_row(engine, h.id)
        assert row is not None
        out.append((row["run_at"] - before).total_seconds())
    return out


def _claim_at_attempt(q: Any, engine: Engine, n: int, k: int) -> list[Any]:
    """n handles whose claim made attempts == k (earlier attempts set by SQL)."""
    ids = q.enqueue_many([b"x"] * n)
    sql(engine, "UPDATE alkstore.jobs SET attempts = :a WHERE id = ANY(:ids)", a=k - 1, ids=ids)
    handles: list[Any] = q.claim_batch("w", n)
    assert len(handles) == n and all(h.job.attempts == k for h in handles)
    return handles


def test_q17_retry_delay_is_drawn_from_floor_half_d_to_floor_d(qs: Any, engine: Engine) -> None:
    for k, low, high in [(1, 1, 2), (2, 2, 4), (3, 4, 8)]:  # d = 2 * 2**(k-1)
        # A queue per k: the jobs retried for k - 1 come due again after 1-8 s,
        # and a slow machine would claim them here.
        q = qs.queue(f"q17-{k}", QueueOpts(retry_base=2, max_attempts=100))
        handles = _claim_at_attempt(q, engine, 24, k)
        delays = [math.floor(d) for d in _delays(q, engine, handles, error="e")]
        assert all(low <= d <= high for d in delays), (k, delays)
        assert len(set(delays)) >= 2  # drawn, not fixed (P(one value in 24) < 1e-4)


def test_q17_retry_delay_is_capped_at_3600(qs: Any, engine: Engine) -> None:
    q = qs.queue("q17", QueueOpts(retry_base=1000, retry_cap=3600, max_attempts=5000))
    for k in (3, 4000):  # 1000 * 2**2 = 4000 > 3600; and an attempt count past any float
        handles = _claim_at_attempt(q, engine, 8, k)
        delays = [math.floor(d) for d in _delays(q, engine, handles)]
        assert all(1800 <= d <= 3600 for d in delays), (k, delays)
        assert len(set(delays)) >= 2


def test_q17_retry_delay_respects_a_smaller_cap(qs: Any, engine: Engine) -> None:
    q = qs.queue("q17", QueueOpts(retry_base=1, retry_cap=10, max_attempts=50))
    handles = _claim_at_attempt(q, engine, 10, 5)  # 16 capped to 10: [5, 10]
    assert all(5 <= math.floor(d) <= 10 for d in _delays(q, engine, handles))


def test_q17_sub_second_base_rounds_down_to_now(qs: Any, engine: Engine) -> None:
    q = qs.queue("q17", QueueOpts(retry_base=0.5))
    (h,) = _claim(q, 1)
    assert h.retry() is True  # d = 0.5: the integers in [0, 0]
    again = q.claim_one("w")
    assert again is not None and again.id == h.id


def test_q17_curve_spread_is_uniform_over_the_inclusive_range() -> None:
    # The draw itself, many times: every integer of [5, 10] about equally often.
    opts = QueueOpts(retry_base=10)
    draws = Counter(backoff_delay(opts, 1) for _ in range(12000))
    assert set(draws) == {5, 6, 7, 8, 9, 10}
    assert all(1700 <= c <= 2300 for c in draws.values()), draws  # expected 2000, sd ~41


def test_q17_explicit_delay_is_used(qs: Any, engine: Engine) -> None:
    q = qs.queue("q17", QueueOpts(retry_base=1000))
    a, b, c = _claim(q, 3)
    assert 120 <= _delays(q, engine, [a], delay=120)[0] < 121
    assert 1.5 <= _delays(q, engine, [b], delay=timedelta(milliseconds=1500))[0] < 2.5
    assert _delays(q, engine, [c], delay=0)[0] < 1
    again = q.claim_one("w")  # delay 0: due at once, despite the queue's curve
    assert again is not None and again.id == c.id


def test_q17_retry_returns_the_row_to_pending_and_keeps_the_error(qs: Any, engine: Engine) -> None:
    q = qs.queue("q17", QueueOpts(max_attempts=5))
    (h,) = _claim(q, 1)
    assert h.retry('boom: it\'s "quoted"', delay=0) is True
    row = live_row(engine, h.id)
    assert row is not None
    assert (row["status"], row["attempts"], row["worker_id"], row["claim_deadline"]) == (
        "pending",
        1,
        None,
        None,
    )
    assert row["last_error"] == 'boom: it\'s "quoted"'
    # Chosen reading: retry(error=None) keeps the previous error (docs/design.md).
    again = q.claim_one("w")
    assert again.retry(delay=0) is True
    assert live_row(engine, h.id)["last_error"] == 'boom: it\'s "quoted"'


# -- Q18 -----------------------------------------------------------------------


def test_q18_retry_with_attempts_used_up_moves_the_row_to_dead(qs: Any, engine: Engine) -> None:
    q = qs.queue("q18", QueueOpts(max_attempts=2))
    for error, expected in [("gave up", "gave up"), (None, "max attempts exceeded")]:
        job_id = q.enqueue(b"payload")
        assert q.claim_one("w").retry("first", delay=0) is True
        last = q.claim_one("w")
        assert last.job.attempts == 2
        assert last.retry(error, delay=0) is True
        assert live_row(engine, job_id) is None
        job = q.get_job(job_id)
        assert job is not None and job.status == "dead" and job.attempts == 2
        assert (job.last_error, job.payload) == (expected, b"payload")


def test_q18_curve_retry_at_the_last_attempt_also_dies(qs: Any) -> None:
    q = qs.queue("q18", QueueOpts(max_attempts=1, retry_base=1000))
    (h,) = _claim(q, 1)
    assert h.retry() is True
    job = q.get_job(h.id)
    assert job is not None and job.status == "dead"
    assert job.last_error == "max attempts exceeded"


# -- Q19 -----------------------------------------------------------------------


FAIL_ERRORS = [
    ("card declined", "card declined"),
    (None, "failed"),
    ("", ""),  # a string, stored verbatim: not replaced by the default
    ("  spaced \n multi-line\t", "  spaced \n multi-line\t"),
    ("'; DROP TABLE alkstore.jobs; --", "'; DROP TABLE alkstore.jobs; --"),
    ("é漢🙂" * 1000, "é漢🙂" * 1000),
]


def test_q19_fail_moves_the_row_to_dead_with_the_error_verbatim(qs: Any, engine: Engine) -> None:
    q = qs.queue("q19", QueueOpts(max_attempts=5))
    handles = _claim(q, len(FAIL_ERRORS))
    for h, (error, expected) in zip(handles, FAIL_ERRORS, strict=True):
        assert h.fail(error) is True
        assert live_row(engine, h.id) is None
        job = q.get_job(h.id)
        assert job is not None and job.status == "dead"
        assert job.last_error == expected and job.attempts == 1  # attempts left: dead anyway


# -- Q20 -----------------------------------------------------------------------

TERMINAL: dict[str, Callable[[Any], bool]] = {
    "ack": lambda h: h.ack(),
    "retry": lambda h: h.retry("e", delay=0),
    "fail": lambda h: h.fail("e"),
}


def test_q20_a_second_terminal_call_raises(qs: Any) -> None:
    q = qs.queue("q20")
    for first, handle in zip(TERMINAL.values(), _claim(q, 3), strict=True):
        assert first(handle) is True
        for second in TERMINAL.values():
            with pytest.raises(HandleSpentError):
                second(handle)


def test_q20_a_refused_terminal_call_still_consumes_the_handle(qs: Any, engine: Engine) -> None:
    q = qs.queue("q20")
    (h,) = _claim(q, 1)
    lapse(engine, h.id)
    assert h.fail("late") is False
    with pytest.raises(HandleSpentError):
        h.ack()


def test_q20_heartbeat_on_a_spent_handle_is_false_without_sql(qs: Any) -> None:
    q = qs.queue("q20")
    (h,) = _claim(q, 1)
    assert h.ack() is True
    spy = SqlSpy(sync_engine_of(qs))
    try:
        with spy.no_sql():
            assert h.heartbeat(10) is False
    finally:
        spy.close()


def test_q20_a_call_refused_by_validation_consumes_nothing(qs: Any) -> None:
    q = qs.queue("q20")
    (h,) = _claim(q, 1)
    with pytest.raises(ValueError):
        h.retry("e", delay=-5)
    with pytest.raises(TypeError):
        h.fail(error=42)
    with pytest.raises(ValueError):
        h.retry("nul\x00")
    assert handle_core(h).spent is False
    assert h.ack() is True


def test_q20_a_call_refused_by_a_closed_store_consumes_nothing(qs: Any) -> None:
    q = qs.queue("q20")
    handles = _claim(q, 3)
    qs.close()
    for h, op in zip(handles, TERMINAL.values(), strict=True):
        with pytest.raises(StoreClosedError):
            op(h)
        assert handle_core(h).spent is False


def test_q20_concurrent_terminal_calls_on_one_handle_run_once(qs: Any) -> None:
    q = qs.queue("q20")
    (h,) = _claim(q, 1)
    barrier = threading.Barrier(8)

    def call(i: int) -> str:
        barrier.wait()
        try:
            return str(list(TERMINAL.values())[i % 3](h))
        except HandleSpentError:
            return "spent"

    with ThreadPoolExecutor(8) as pool:
        outcomes = Counter(pool.map(call, range(8)))
    assert outcomes == {"True": 1, "spent": 7}


# -- Q21 -----------------------------------------------------------------------


def test_q21_dead_rows_keep_their_fields_and_are_visible(qs: Any, engine: Engine) -> None:
    q = qs.queue("q21", QueueOpts(priority=3, max_attempts=4, visibility_timeout=9))
    (h,) = _claim(q, 1, worker="w-21")
    live = q.get_job(h.id)
    before = db_now(engine)
    assert h.fail("broken") is True
    after = db_now(engine)
    dead = q.get_job(h.id)
    assert dead is not None and dead.status == "dead"
    assert before <= dead.died_at <= after
    assert dead.last_error == "broken"
    same = (
        "payload",
        "attempts",
        "priority",
        "run_at",
        "max_attempts",
        "created_at",
        "visibility_timeout",
        "expires_at",
        "worker_id",
        "queue",
        "id",
    )
    assert {f: getattr(dead, f) for f in same} == {f: getattr(live, f) for f in same}
    assert live.died_at is None


def test_q21_every_way_to_die_is_visible_to_get_job(qs: Any, engine: Engine) -> None:
    q = qs.queue("q21", QueueOpts(max_attempts=1))
    failed, retried, lapsed, expired = _claim(q, 4)
    pending_expired = q.enqueue(b"pe")
    failed.fail()
    retried.retry()
    lapse(engine, lapsed.id)
    expire(engine, expired.id, pending_expired)
    q.sweep_expired()
    errors = {
        failed.id: "failed",
        retried.id: "max attempts exceeded",
        lapsed.id: "max attempts exceeded",
        expired.id: "expired",
        pending_expired: "expired",
    }
    for job_id, error in errors.items():
        job = q.get_job(job_id)
        assert job is not None and (job.status, job.last_error) == ("dead", error)
        assert job.died_at is not None
    assert q.get_job(pending_expired).attempts == 0


def test_q20_a_call_refused_for_a_wrong_session_type_consumes_nothing(qs: Any) -> None:
    q = qs.queue("q20")
    (h,) = _claim(q, 1)
    with pytest.raises(TypeError):
        h.ack(session="not a session")
    assert handle_core(h).spent is False
    assert h.ack() is True
