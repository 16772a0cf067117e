"""U1: unique jobs -- at most one live job per queue and key, enforced by PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import URL, Engine, create_engine, event, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import AsyncSession as AsyncOrmSession
from sqlalchemy.orm import Session

from alkstore_sa import AlkstoreError, AsyncStore, EnqueueOpts, QueueOpts, Store, otel
from alkstore_sa._db.enqueue import KEYED_ROUNDS
from alkstore_sa._values.validate import MAX_UNIQUE_KEY_BYTES

from .._qtools import expire, lapse, live_row, sql
from .._sqlspy import SqlSpy, sync_engine_of
from ..cli.test_cli import alkstore
from . import test_b3_otel as b3
from .test_q_enqueue import _one_then_quiet, _received, listening


def _live(engine: Engine, queue: str) -> list[dict[str, Any]]:
    return sql(
        engine,
        "SELECT id, payload, unique_key FROM alkstore.jobs WHERE queue = :q ORDER BY id",
        q=queue,
    )


def _keyed(key: str) -> EnqueueOpts:
    return EnqueueOpts(unique_key=key)


# -- the rule, one key at a time ---------------------------------------------------


def test_u1_repeat_key_returns_live_id_and_writes_nothing(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    first = q.enqueue(b"first", _keyed("order-42"))
    row = sql(engine, "SELECT xmin::text AS x, ctid::text AS c FROM alkstore.jobs")
    again = q.enqueue(b"second", _keyed("order-42"))
    assert again == first
    # Not one row written: the same row version, no other row.
    assert sql(engine, "SELECT xmin::text AS x, ctid::text AS c FROM alkstore.jobs") == row
    assert [r["payload"] for r in _live(engine, "u1")] == [b"first"]
    job = q.get_job(first)
    assert job is not None and job.unique_key == "order-42" and job.payload == b"first"


def test_u1_a_processing_job_holds_its_key(qs: Any) -> None:
    q = qs.queue("u1")
    job_id = q.enqueue(b"x", _keyed("k"))
    handle = q.claim_one("w")
    assert handle is not None and handle.id == job_id
    assert handle.job.unique_key == "k"  # the claimed row carries it
    assert q.enqueue(b"y", _keyed("k")) == job_id
    assert q.claim_one("w") is None  # nothing new was enqueued


def test_u1_keys_are_per_queue_and_keyless_jobs_never_collide(qs: Any, engine: Engine) -> None:
    a, b = qs.queue("u1-a"), qs.queue("u1-b")
    in_a = a.enqueue(b"x", _keyed("same"))
    in_b = b.enqueue(b"x", _keyed("same"))
    assert in_a != in_b
    plain = [a.enqueue(b"p"), a.enqueue(b"p"), *a.enqueue_many([b"p", b"p"])]
    assert len(set(plain)) == 4 and in_a not in plain
    assert a.get_job(plain[0]).unique_key is None  # type: ignore[union-attr]
    assert len(_live(engine, "u1-a")) == 5


def test_u1_duplicate_enqueue_wakes_no_one(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    with listening(engine, q.channel) as conn:
        q.enqueue(b"x", _keyed("k"))
        assert len(_one_then_quiet(conn)) == 1  # a new job: one wake (Q7)
        q.enqueue(b"x", _keyed("k"))
        q.enqueue_many([b"x", b"y"], unique_keys=["k", "k"])
        assert _received(conn, 0.3) == []  # nothing new to claim


# -- when the key is free again ------------------------------------------------------


def _ack(q: Any, engine: Engine, job_id: int) -> None:
    handle = q.claim_one("w")
    assert handle is not None and handle.id == job_id and handle.ack() is True


def _ack_batch(q: Any, engine: Engine, job_id: int) -> None:
    handle = q.claim_one("w")
    assert handle is not None and q.ack_batch([job_id]) == 1


def _cancel(q: Any, engine: Engine, job_id: int) -> None:
    assert q.cancel(job_id) is True


def _fail(q: Any, engine: Engine, job_id: int) -> None:
    handle = q.claim_one("w")
    assert handle is not None and handle.fail("boom") is True


def _retry_out(q: Any, engine: Engine, job_id: int) -> None:
    for _ in range(2):  # max_attempts=2: the second retry dead-letters
        handle = q.claim_one("w")
        assert handle is not None and handle.retry("again", delay=0) is True


def _lapse_out(q: Any, engine: Engine, job_id: int) -> None:
    for _ in range(2):
        handle = q.claim_one("w")
        assert handle is not None
        lapse(engine, job_id)
    assert q.claim_one("w") is None  # this claim buried it first (Q12)


def _expire(q: Any, engine: Engine, job_id: int) -> None:
    expire(engine, job_id)
    assert q.sweep_expired().expired == 1


ENDS: dict[str, Callable[[Any, Engine, int], None]] = {
    "ack": _ack,
    "ack_batch": _ack_batch,
    "cancel": _cancel,
    "fail": _fail,
    "retries_used_up": _retry_out,
    "lapsed_last_attempt": _lapse_out,
    "expired": _expire,
}


@pytest.mark.parametrize("end", sorted(ENDS))
def test_u1_key_is_free_after_the_job_ends(qs: Any, engine: Engine, end: str) -> None:
    q = qs.queue("u1", QueueOpts(max_attempts=2))
    old = q.enqueue(b"old", _keyed("k"))
    ENDS[end](q, engine, old)
    assert live_row(engine, old) is None
    new = q.enqueue(b"new", _keyed("k"))
    assert new != old
    assert [(r["id"], r["unique_key"]) for r in _live(engine, "u1")] == [(new, "k")]
    ended = q.get_job(old)
    if ended is not None:  # dead: the letter remembers the key it had
        assert ended.status == "dead" and ended.unique_key == "k"


def test_u1_a_retried_job_keeps_its_key(qs: Any) -> None:
    q = qs.queue("u1", QueueOpts(max_attempts=3))
    job_id = q.enqueue(b"x", _keyed("k"))
    handle = q.claim_one("w")
    assert handle is not None and handle.retry("flaky", delay=0) is True
    job = q.get_job(job_id)
    assert job is not None and job.status == "pending" and job.unique_key == "k"
    assert q.enqueue(b"y", _keyed("k")) == job_id  # still live, still the key's job
    again = q.claim_one("w")
    assert again is not None and again.id == job_id and again.job.attempts == 2


# -- enqueue_many ----------------------------------------------------------------------


def test_u1_enqueue_many_collapses_repeats_to_the_first(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    payloads = [b"a1", b"b1", b"a2", b"n1", b"b2", b"n2"]
    ids = q.enqueue_many(payloads, unique_keys=["a", "b", "a", None, "b", None])
    a, b, n1, n2 = ids[0], ids[1], ids[3], ids[5]
    assert ids == [a, b, a, n1, b, n2]
    assert a < b < n1 < n2  # new rows: ids ascend in input order (Q9's enqueue order)
    assert [(r["id"], r["payload"], r["unique_key"]) for r in _live(engine, "u1")] == [
        (a, b"a1", "a"),
        (b, b"b1", "b"),
        (n1, b"n1", None),
        (n2, b"n2", None),
    ]
    claimed = [h.id for h in q.claim_batch("w", 10)]
    assert claimed == [a, b, n1, n2]


def test_u1_enqueue_many_returns_live_ids_beside_new_ones(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    live = q.enqueue(b"live", _keyed("live"))
    ids = q.enqueue_many([b"x", b"y", b"z"], unique_keys=["new", "live", None])
    assert ids[1] == live and len(set(ids)) == 3
    assert q.get_job(ids[0]).unique_key == "new"  # type: ignore[union-attr]
    assert len(_live(engine, "u1")) == 3
    # Every key live: nothing written, the live ids back.
    assert q.enqueue_many([b"p", b"q"], unique_keys=["new", "live"]) == [ids[0], live]
    assert len(_live(engine, "u1")) == 3


def test_u1_enqueue_many_opts_key_applies_to_every_payload(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    ids = q.enqueue_many([b"1", b"2", b"3"], _keyed("one"))
    assert len(set(ids)) == 1
    assert [r["payload"] for r in _live(engine, "u1")] == [b"1"]
    assert q.enqueue_many([b"4"], EnqueueOpts(unique_key="one", priority=9)) == ids[:1]


def test_u1_enqueue_many_without_keys_sends_the_plain_statement(qs: Any, engine: Engine) -> None:
    """No key at all (None everywhere): the no-key statement, as it always was."""
    q = qs.queue("u1")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        q.enqueue_many([b"a", b"b"], unique_keys=[None, None])
        q.enqueue(b"c")
        q.enqueue(b"d", _keyed("k"))
    finally:
        spy.close()
    sent = [s for s, _ in spy.statements if "INSERT INTO" in s]
    assert len(sent) == 3
    assert ["ON CONFLICT" in s for s in sent] == [False, False, True]
    assert all("unique_key" not in s for s in sent[:2])


def test_u1_other_options_still_apply_to_keyed_jobs(qs: Any) -> None:
    q = qs.queue("u1", QueueOpts(priority=1, max_attempts=4))
    opts = EnqueueOpts(unique_key="k", priority=5, delay=60, max_attempts=2, expires_in=600)
    job = q.get_job(q.enqueue(b"x", opts))
    assert job is not None
    assert (job.priority, job.max_attempts, job.unique_key) == (5, 2, "k")
    assert job.run_at > job.created_at and job.expires_at is not None
    assert q.claim_one("w") is None  # delayed, like any job


# -- validation: before any SQL ------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", " ", "\t\n", "a\x00b", "x" * (MAX_UNIQUE_KEY_BYTES + 1)])
def test_u1_empty_or_bad_key_is_a_value_error_before_sql(qs: Any, bad: str) -> None:
    q = qs.queue("u1")
    with pytest.raises(ValueError, match="unique_key"):
        EnqueueOpts(unique_key=bad)
    spy = SqlSpy(sync_engine_of(qs))
    try:
        with spy.no_sql(), pytest.raises(ValueError, match="unique key"):
            q.enqueue_many([b"a", b"b"], unique_keys=["fine", bad])
    finally:
        spy.close()


def test_u1_key_limits(qs: Any) -> None:
    q = qs.queue("u1")
    longest = "é" * (MAX_UNIQUE_KEY_BYTES // 2)  # bytes, not characters
    assert q.get_job(q.enqueue(b"x", _keyed(longest))).unique_key == longest  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="bytes"):
        EnqueueOpts(unique_key=longest + "é")
    with pytest.raises(ValueError, match="surrogate"):
        EnqueueOpts(unique_key="\ud800")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"unique_keys": "ab"}, TypeError),  # a str is one value, not keys
        ({"unique_keys": 3}, TypeError),
        ({"unique_keys": [b"a", None]}, TypeError),
        ({"unique_keys": [1, None]}, TypeError),
        ({"unique_keys": ["a"]}, ValueError),  # one short
        ({"unique_keys": ["a", "b", "c"]}, ValueError),
        ({"unique_keys": ["a", "b"], "opts": EnqueueOpts(unique_key="c")}, ValueError),
    ],
)
def test_u1_bad_unique_keys_are_refused_before_sql(
    qs: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    q = qs.queue("u1")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        with spy.no_sql(), pytest.raises(error):
            q.enqueue_many([b"a", b"b"], **kwargs)
    finally:
        spy.close()


def test_u1_a_key_that_is_not_a_str_is_a_type_error() -> None:
    for bad in (42, b"order-42", ["k"]):
        with pytest.raises(TypeError, match="unique_key must be a str"):
            EnqueueOpts(unique_key=bad)  # type: ignore[arg-type]


# -- transactions -----------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_u1_session_enqueue_holds_the_key_in_the_callers_transaction(
    store: Store, engine: Engine, outcome: str
) -> None:
    q = store.queue("u1")
    with Session(engine) as session:
        mine = q.enqueue(b"x", _keyed("k"), session=session)
        # The transaction sees its own uncommitted job: a repeat returns it.
        assert q.enqueue(b"y", _keyed("k"), session=session) == mine
        assert q.enqueue_many([b"z"], unique_keys=["k"], session=session) == [mine]
        getattr(session, outcome)()
    after = q.enqueue(b"after", _keyed("k"))
    assert (after == mine) is (outcome == "commit")


async def test_u1_async_session_enqueue_holds_the_key(
    async_engine: AsyncEngine, engine: Engine
) -> None:
    q = AsyncStore(async_engine).queue("u1")
    async with AsyncOrmSession(async_engine) as session:
        mine = await q.enqueue(b"x", _keyed("k"), session=session)
        assert await q.enqueue_many([b"y", b"z"], _keyed("k"), session=session) == [mine, mine]
        await session.commit()
    assert await q.enqueue(b"after", _keyed("k")) == mine
    async with async_engine.connect() as conn:
        rolled = await q.enqueue(b"r", _keyed("r"), session=conn)
        await conn.rollback()
    assert await q.enqueue(b"r2", _keyed("r")) != rolled


def _wait_until_blocked(engine: Engine, timeout: float = 10.0) -> None:
    """Until a backend waits on a lock in a keyed insert: the second enqueue is blocked."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sql(
            engine,
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
            # The requeue's text is cut (track_activity_query_size) before its ON CONFLICT.
            " AND (query LIKE '%ON CONFLICT%' OR query LIKE 'WITH requeued AS%')",
        )
        if rows[0]["n"]:
            return
        time.sleep(0.01)
    raise AssertionError("the second enqueue never waited for the first transaction")


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_u1_two_transactions_one_key_the_second_waits_for_the_first(
    qs: Any, store: Store, engine: Engine, outcome: str
) -> None:
    """The second enqueue waits on the first's uncommitted job: its id once that
    commits, its own job once that rolls back."""
    first_q = store.queue("u1")
    second_q = qs.queue("u1")
    with ThreadPoolExecutor(1) as pool, Session(engine) as session:
        first = first_q.enqueue(b"first", _keyed("k"), session=session)
        second: Future[int] = pool.submit(second_q.enqueue, b"second", _keyed("k"))
        _wait_until_blocked(engine)
        assert not second.done()
        getattr(session, outcome)()
        got = second.result(timeout=10)
    rows = _live(engine, "u1")
    if outcome == "commit":
        assert got == first and [r["payload"] for r in rows] == [b"first"]
    else:
        assert got != first and [(r["id"], r["payload"]) for r in rows] == [(got, b"second")]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_u1_enqueue_many_waits_for_each_key_another_transaction_holds(
    qs: Any, store: Store, engine: Engine, outcome: str
) -> None:
    first_q = store.queue("u1")
    second_q = qs.queue("u1")
    with ThreadPoolExecutor(1) as pool, Session(engine) as session:
        held = first_q.enqueue(b"held", _keyed("b"), session=session)
        batch: Future[list[int]] = pool.submit(
            second_q.enqueue_many, [b"a", b"b", b"c"], unique_keys=["a", "b", None]
        )
        _wait_until_blocked(engine)
        getattr(session, outcome)()
        ids = batch.result(timeout=10)
    assert (ids[1] == held) is (outcome == "commit")
    payloads = {r["unique_key"]: r["payload"] for r in _live(engine, "u1")}
    assert payloads["b"] == (b"held" if outcome == "commit" else b"b")
    assert len(set(ids)) == 3


def test_u1_concurrent_enqueues_make_one_job_per_key(qs: Any, engine: Engine) -> None:
    """6 threads x 40 concurrent enqueues over 10 keys: exactly 10 jobs, and every
    call got its key's job."""
    q = qs.queue("u1")
    threads, calls, keys = 6, 40, 10
    start = threading.Barrier(threads)

    def enqueue_all(t: int) -> list[tuple[str, int]]:
        start.wait()
        out = []
        for i in range(calls):
            key = f"key-{(t + i) % keys}"
            out.append((key, q.enqueue(b"%d-%d" % (t, i), _keyed(key))))
        return out

    with ThreadPoolExecutor(threads) as pool:
        results = [pair for part in pool.map(enqueue_all, range(threads)) for pair in part]
    rows = _live(engine, "u1")
    assert len(rows) == keys
    job_of = {r["unique_key"]: r["id"] for r in rows}
    assert all(job_of[key] == got for key, got in results)
    assert Counter(key for key, _ in results) == {
        f"key-{k}": calls * threads // keys for k in range(keys)
    }


def test_u1_concurrent_enqueue_many_over_shared_keys(qs: Any, engine: Engine) -> None:
    """Batches over the same keys (in the same order) from 4 threads: one job per key."""
    q = qs.queue("u1")
    keys = [f"k{i}" for i in range(10)]
    start = threading.Barrier(4)

    def batch(_: int) -> list[int]:
        start.wait()
        return list(q.enqueue_many([k.encode() for k in keys], unique_keys=keys))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(batch, range(4)))
    rows = _live(engine, "u1")
    assert [r["unique_key"] for r in rows] == keys
    assert all(ids == [r["id"] for r in rows] for ids in results)


# -- requeue_dead (O2) ---------------------------------------------------------------------


def _die(q: Any, payload: bytes, key: str | None) -> int:
    job_id = q.enqueue(payload, None if key is None else _keyed(key))
    handle = q.claim_one("w")
    assert handle is not None and handle.id == job_id and handle.fail("boom") is True
    return job_id


def test_u1_requeue_dead_skips_a_dead_job_whose_key_is_live(qs: Any, engine: Engine) -> None:
    q = qs.queue("u1")
    dead = _die(q, b"dead", "k")
    other = _die(q, b"other", "free")
    plain = _die(q, b"plain", None)
    live = q.enqueue(b"live", _keyed("k"))
    assert q.requeue_dead() == 2  # "free" and the keyless one; "k" is live
    assert q.get_job(dead).status == "dead"  # type: ignore[union-attr]
    back = q.get_job(other)
    assert back is not None and back.status == "pending" and back.unique_key == "free"
    assert q.get_job(plain).status == "pending"  # type: ignore[union-attr]
    assert q.requeue_dead([dead]) == 0  # by id too
    assert q.cancel(live) is True
    assert q.requeue_dead([dead]) == 1  # the key is free: back it goes, key and all
    job = q.get_job(dead)
    assert job is not None and job.status == "pending" and job.unique_key == "k"
    assert q.enqueue(b"again", _keyed("k")) == dead


def test_u1_requeue_dead_moves_one_of_several_dead_jobs_sharing_a_key(
    qs: Any, engine: Engine
) -> None:
    q = qs.queue("u1")
    older = _die(q, b"older", "k")
    newer = _die(q, b"newer", "k")
    assert q.requeue_dead() == 1  # the first to die
    assert q.get_job(older).status == "pending"  # type: ignore[union-attr]
    assert q.get_job(newer).status == "dead"  # type: ignore[union-attr]
    assert q.stats().dead == 1


def test_u1_requeue_dead_waits_for_a_transaction_enqueuing_the_key(
    store: Store, engine: Engine
) -> None:
    q = store.queue("u1")
    dead = _die(q, b"dead", "k")
    with ThreadPoolExecutor(1) as pool, Session(engine) as session:
        q.enqueue(b"live", _keyed("k"), session=session)
        moved: Future[int] = pool.submit(q.requeue_dead)
        _wait_until_blocked(engine)
        session.commit()
        assert moved.result(timeout=10) == 0
    assert q.get_job(dead).status == "dead"  # type: ignore[union-attr]


# -- the key is shown --------------------------------------------------------------------


def test_u1_job_listing_and_cli_show_the_key(database_url: URL, store: Store) -> None:
    q = store.queue("u1")
    keyed = q.enqueue(b"x", _keyed("order-42"))
    plain = q.enqueue(b"y")
    listed = {j.id: j.unique_key for j in q.jobs()}
    assert listed == {keyed: "order-42", plain: None}
    proc = alkstore("jobs", "u1", "--json", url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert {j["id"]: j["unique_key"] for j in json.loads(proc.stdout)} == listed


@pytest.fixture
def tel() -> Iterator[b3.Otel]:
    """B3's set-up: an SDK tracer provider with in-memory export, instrumented."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    otel.instrument(tracer_provider=provider, meter_provider=meters)
    try:
        yield b3.Otel(spans, reader, provider.get_tracer("tests"))
    finally:
        otel.uninstrument()
        provider.shutdown()
        meters.shutdown()


def test_u1_b3_traced_keyed_enqueue_stores_the_context(tel: b3.Otel, store: Store) -> None:
    q = store.queue("u1")
    with tel.tracer.start_as_current_span("caller"):
        first = q.enqueue(b"x", _keyed("k"))
        ids = q.enqueue_many([b"y", b"z"], unique_keys=["k", "n"])
    assert ids[0] == first
    for job_id in (first, ids[1]):
        carrier = b3._stored_context(store, job_id)
        assert carrier and "traceparent" in carrier
    assert len(tel.finished("send u1")) == 2  # one producer span per call, as ever


# -- the look-up's corner: the live job ends between the insert and the look-up ----------


def _around_keyed_inserts(
    engine: Engine, before: Callable[[], None] | None, after: Callable[[], None]
) -> Callable[[], None]:
    """Run ``before``/``after`` (on other connections) around each keyed insert; returns undo."""

    def pre(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "ON CONFLICT" in statement and before is not None:
            before()

    def post(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "ON CONFLICT" in statement:
            after()

    event.listen(engine, "before_cursor_execute", pre)
    event.listen(engine, "after_cursor_execute", post)

    def undo() -> None:
        event.remove(engine, "before_cursor_execute", pre)
        event.remove(engine, "after_cursor_execute", post)

    return undo


def test_u1_a_key_whose_job_ends_before_the_look_up_is_inserted_again(
    store: Store, engine: Engine
) -> None:
    q = store.queue("u1")
    old = q.enqueue(b"old", _keyed("k"))
    other = create_engine(engine.url)
    ended: list[int] = []

    def end_the_live_job() -> None:  # as an ack on another connection would
        if not ended:
            ended.append(old)
            with other.begin() as conn:
                conn.execute(text("DELETE FROM alkstore.jobs WHERE id = :id"), {"id": old})

    undo = _around_keyed_inserts(engine, None, end_the_live_job)
    try:
        new = q.enqueue(b"new", _keyed("k"))
    finally:
        undo()
        other.dispose()
    assert ended == [old] and new != old
    assert [(r["id"], r["payload"]) for r in _live(engine, "u1")] == [(new, b"new")]


def test_u1_gives_up_after_rounds_of_keys_that_keep_ending(store: Store, engine: Engine) -> None:
    q = store.queue("u1")
    other = create_engine(engine.url)
    made: list[int] = []

    def make_one() -> None:  # a job of the key, committed just before each insert ...
        with other.begin() as conn:
            made.append(q.enqueue(b"racer", _keyed("k"), session=conn))

    def end_it() -> None:  # ... and gone just after it
        with other.begin() as conn:
            conn.execute(text("DELETE FROM alkstore.jobs WHERE id = :id"), {"id": made[-1]})

    undo = _around_keyed_inserts(engine, make_one, end_it)
    try:
        with pytest.raises(AlkstoreError, match="kept finishing"):
            q.enqueue(b"mine", _keyed("k"))
    finally:
        undo()
        other.dispose()
    assert len(made) == KEYED_ROUNDS and _live(engine, "u1") == []
