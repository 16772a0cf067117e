"""Server timeouts on the application's engine (docs/reliability.md "Timeouts").

The store's engine here carries ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` on every connection (``connect_args``:
libpq ``options`` for psycopg, ``server_settings`` for asyncpg), as an
application's engine would.  The library honours them: every operation
either works, or raises the driver's error wrapped by SQLAlchemy
(``sqlalchemy.exc.OperationalError``, a ``DBAPIError``, whose SQLSTATE names
the timeout) -- and a statement a timeout cancels moves nothing: each
operation is one statement (or, for a sweep, one transaction), so
PostgreSQL undoes all of it.  The tests check the tables after each failure.

Timeouts are provoked, not waited for: a lock held by another connection
(``lock_timeout``), a trigger that sleeps on each row of a long move
(``statement_timeout`` in the middle of it), a handler that sits in its
session's transaction (``idle_in_transaction_session_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy import event as sa_event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from alkstore_sa import AsyncStore, AsyncWorker, EnqueueOpts, Store, Worker
from alkstore_sa._db.sqlstate import sqlstate
from alkstore_sa._values.job import Job

from .. import _api, _drivers
from .._qtools import expire, lapse, sql
from .._workers import KINDS, handler, start_worker, wait_for

FACES = ["sync", *_drivers.ASYNC_FACES]

QUERY_CANCELED = "57014"  # statement_timeout (and a cancel request)
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout


def engine_kw(face: str, **settings: str) -> dict[str, Any]:
    """``create_engine`` arguments giving every connection these server settings."""
    if face == "asyncpg":
        return {"connect_args": {"server_settings": settings}}
    return {"connect_args": {"options": " ".join(f"-c {k}={v}" for k, v in settings.items())}}


@pytest.fixture
def admin(database_url: URL) -> Iterator[Engine]:
    """Connections of the test's own: no timeouts, no pool (reads, locks, triggers)."""
    eng = create_engine(database_url, poolclass=NullPool)
    yield eng
    eng.dispose()


@pytest.fixture(params=FACES)
def make_store(request: pytest.FixtureRequest, database_url: URL) -> Iterator[Any]:
    """``make_store(**settings)``: a ``Store``, or an ``AsyncStore`` seen through the
    blocking adapter, whose engine's connections carry ``settings``."""
    face = request.param
    closers: list[Callable[[], None]] = []
    loop: _api.LoopThread | None = None

    def make(**settings: str) -> Any:
        nonlocal loop
        kw = {"pool_size": 5, "max_overflow": 5, **engine_kw(face, **settings)}
        if face == "sync":
            eng = create_engine(database_url, **kw)
            store = Store(eng)
            closers.append(eng.dispose)
            closers.append(store.close)
            return store
        if loop is None:
            loop = _api.LoopThread()
        aeng = create_async_engine(_drivers.async_url(database_url, face), **kw)
        astore = AsyncStore(aeng)
        closers.append(lambda: loop.run(aeng.dispose()))  # type: ignore[union-attr]
        closers.append(lambda: loop.run(astore.close()))  # type: ignore[union-attr]
        return _api.SyncView(astore, loop)

    yield make
    for close in reversed(closers):
        close()
    if loop is not None:
        loop.stop()


def tables(admin: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the three tables a job moves between, as comparable tuples."""
    return {
        "jobs": [
            tuple(r.values())
            for r in sql(
                admin,
                "SELECT id, queue, status, attempts, worker_id, claim_deadline, run_at, "
                "last_error, priority FROM alkstore.jobs ORDER BY id",
            )
        ],
        "dead": [
            tuple(r.values())
            for r in sql(admin, "SELECT id, queue, last_error FROM alkstore.dead_jobs ORDER BY id")
        ],
        "paused": [
            tuple(r.values()) for r in sql(admin, "SELECT queue FROM alkstore.paused_queues")
        ],
    }


def state_of(exc: BaseException) -> str | None:
    assert isinstance(exc, DBAPIError), f"expected SQLAlchemy's DBAPIError, got {exc!r}"
    return sqlstate(exc.orig)


@contextmanager
def held(admin: Engine, statement: str, **params: Any) -> Iterator[None]:
    """``statement`` (a LOCK TABLE, a SELECT ... FOR UPDATE) holding its locks until the end."""
    with admin.connect() as conn:
        conn.execute(text(statement), params)
        try:
            yield
        finally:
            conn.rollback()


# -- every operation works under tight timeouts ------------------------------------


def test_r_timeouts_every_operation_works_under_tight_server_timeouts(
    make_store: Any, admin: Engine
) -> None:
    s = make_store(
        statement_timeout="500ms", lock_timeout="50ms", idle_in_transaction_session_timeout="300ms"
    )
    q = s.queue("tight")
    shown = sql(admin, "SELECT 1 AS one")  # the admin's connection has no timeouts
    assert shown == [{"one": 1}]
    first = q.enqueue(b"a")
    assert len(q.enqueue_many([b"b", b"c", b"d", b"e", b"f"])) == 5
    keyed = q.enqueue_many([b"k1", b"k2"], unique_keys=["k1", "k2"])
    assert q.enqueue_many([b"again"], unique_keys=["k1"]) == keyed[:1]
    # The pool's idle connections are not in a transaction: the idle-in-
    # transaction timeout never ends them between operations.
    time.sleep(0.6)
    assert q.get_job(first).status == "pending"
    h1, h2, h3, h4, *rest = q.claim_batch("w", 10)
    assert h1.heartbeat(30) is True
    assert h1.ack() is True
    assert h2.retry("again", delay=0) is True
    assert h3.fail("no") is True
    assert q.cancel(h4.id) is True
    assert q.ack_batch([h.id for h in rest]) == len(rest)
    assert q.requeue_dead() == 1
    assert q.claim_one("w").fail("no") is True
    assert q.purge_dead() == 1
    assert q.pause() is True and q.resume() is True
    assert q.stats().due == 1
    assert len(q.jobs()) == 1
    assert s.queue_names() == ["tight"]
    assert set(s.stats()) == {"tight"}
    expire(admin, q.jobs()[0].id)
    assert q.sweep_expired().expired == 1
    time.sleep(0.6)
    assert q.stats().dead == 1 and q.stats().due == 0


# -- lock_timeout: a clear error, nothing moved, the next call works ---------------


def test_r_timeouts_lock_timeout_fails_each_operation_cleanly_and_moves_nothing(
    make_store: Any, admin: Engine
) -> None:
    s = make_store(statement_timeout="5s", lock_timeout="40ms")
    q = s.queue("locked")
    q.enqueue_many([b"1", b"2", b"3", b"4", b"5", b"6"])
    ack, retry, fail, beat, *_ = q.claim_batch("w", 4)
    dead = q.claim_one("w")
    assert dead is not None and dead.fail("boom") is True
    before = tables(admin)
    operations: dict[str, Callable[[], object]] = {
        "enqueue": lambda: q.enqueue(b"x"),
        "enqueue_many": lambda: q.enqueue_many([b"x", b"y"]),
        "enqueue keyed": lambda: q.enqueue_many([b"x"], unique_keys=["k"]),
        "claim_batch": lambda: q.claim_batch("w", 2),
        "ack": ack.ack,
        "retry": lambda: retry.retry("e", delay=0),
        "fail": lambda: fail.fail("e"),
        "heartbeat": lambda: beat.heartbeat(30),
        "cancel": lambda: q.cancel(ack.id),
        "ack_batch": lambda: q.ack_batch([ack.id]),
        "requeue_dead": q.requeue_dead,
        "purge_dead": q.purge_dead,
        "pause": q.pause,
        "sweep_expired": q.sweep_expired,
        "stats": q.stats,
        "jobs": q.jobs,
        "get_job": lambda: q.get_job(ack.id),
        "store stats": s.stats,
    }
    # A migration, a VACUUM FULL, a LOCK TABLE: every statement touching the
    # tables waits, and gives up after lock_timeout.
    with held(
        admin,
        "LOCK TABLE alkstore.jobs, alkstore.dead_jobs, alkstore.paused_queues "
        "IN ACCESS EXCLUSIVE MODE",
    ):
        for name, op in operations.items():
            began = time.monotonic()
            with pytest.raises(DBAPIError) as caught:
                op()
            assert state_of(caught.value) == LOCK_NOT_AVAILABLE, name
            assert "lock timeout" in str(caught.value), name
            assert time.monotonic() - began < 3, name  # lock_timeout, not statement_timeout
    assert tables(admin) == before
    # Nothing was spent: each handle's call works once the lock is gone (Q30).
    assert ack.ack() is True
    assert retry.retry("e", delay=0) is True
    assert fail.fail("e") is True
    assert beat.heartbeat(30) is True
    assert q.requeue_dead() == 2


def test_r_timeouts_a_claim_skips_rows_a_long_operation_holds_instead_of_waiting(
    make_store: Any, admin: Engine
) -> None:
    s = make_store(lock_timeout="20ms")
    q = s.queue("rows")
    ids = q.enqueue_many([b"%d" % i for i in range(6)])
    # Another transaction holds three pending rows (a long requeue, purge or
    # cancel inside someone's session takes such row locks).
    with held(admin, "SELECT id FROM alkstore.jobs WHERE id = ANY(:ids) FOR UPDATE", ids=ids[:3]):
        got = q.claim_batch("w", 6)
        assert [h.id for h in got] == ids[3:]  # skipped, never waited for (Q8)
        # An operation on a held row itself waits, and gives up cleanly.
        with pytest.raises(DBAPIError) as caught:
            q.cancel(ids[0])
        assert state_of(caught.value) == LOCK_NOT_AVAILABLE
    assert q.cancel(ids[0]) is True
    assert [h.id for h in q.claim_batch("w", 6)] == ids[1:3]


def test_r_timeouts_a_claim_beside_an_uncommitted_requeue_and_purge_works(
    make_store: Any, admin: Engine, database_url: URL
) -> None:
    s = make_store(lock_timeout="20ms")
    q = s.queue("beside")
    q.enqueue_many([b"1", b"2", b"3", b"4"])
    for h in q.claim_batch("w", 2):
        h.fail("x")
    # A requeue and a purge of the dead rows, each in a caller's transaction
    # left open (session=): their row locks and new rows are invisible to a claim.
    sync = Store(create_engine(database_url, poolclass=NullPool))
    try:
        with sync.engine.connect() as conn:
            assert sync.queue("beside").requeue_dead(session=conn) == 2
            assert sync.queue("beside").purge_dead(session=conn) == 0
            got = q.claim_batch("w", 10)
            assert len(got) == 2  # the two pending ones, at once
            conn.rollback()
    finally:
        sync.close()
        sync.engine.dispose()


# -- statement_timeout in the middle of a long move: all of it undone ---------------

SLOW_ROWS = """
CREATE FUNCTION alkstore.slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(0.06);
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$
"""


@contextmanager
def slow(admin: Engine, table: str, event: str) -> Iterator[None]:
    """Each row ``event`` on ``table`` takes 60 ms: a move of many rows outlasts the timeout."""
    sql(
        admin,
        f"CREATE TRIGGER slow_row BEFORE {event} ON alkstore.{table} "
        "FOR EACH ROW EXECUTE FUNCTION alkstore.slow_row()",
    )
    try:
        yield
    finally:
        sql(admin, f"DROP TRIGGER slow_row ON alkstore.{table}")


def test_r_timeouts_statement_timeout_in_a_long_move_undoes_all_of_it(
    make_store: Any, admin: Engine
) -> None:
    sql(admin, SLOW_ROWS)
    fast = make_store()
    s = make_store(statement_timeout="150ms")
    q, setup = s.queue("long"), fast.queue("long")
    setup.enqueue_many([b"%d" % i for i in range(12)])
    for h in setup.claim_batch("w", 8):
        h.fail("dead")
    ids = [h.id for h in setup.claim_batch("w", 4)]
    before = tables(admin)
    moves: list[tuple[str, str, str, Callable[[], object]]] = [
        ("enqueue_many", "jobs", "INSERT", lambda: q.enqueue_many([b"n"] * 12)),
        ("requeue_dead", "jobs", "INSERT", q.requeue_dead),
        ("purge_dead", "dead_jobs", "DELETE", q.purge_dead),
        ("ack_batch", "jobs", "DELETE", lambda: q.ack_batch(ids)),
    ]
    for name, table, event, op in moves:
        with slow(admin, table, event), pytest.raises(DBAPIError) as caught:
            op()
        assert state_of(caught.value) == QUERY_CANCELED, name
        assert "statement timeout" in str(caught.value), name
        assert tables(admin) == before, name  # not one row of the move stayed
    # The claim (an UPDATE of every row it takes) and the sweep (one
    # transaction of three statements) alike.
    setup.ack_batch(ids)
    assert setup.requeue_dead() == 8
    before = tables(admin)
    with slow(admin, "jobs", "UPDATE"), pytest.raises(DBAPIError) as caught:
        q.claim_batch("w", 10)
    assert state_of(caught.value) == QUERY_CANCELED
    assert tables(admin) == before  # nothing claimed: all 8 pending, attempts as they were
    held_ids = [h.id for h in setup.claim_batch("w", 10)]
    assert len(held_ids) == 8
    lapse(admin, *held_ids)
    sql(
        admin, "UPDATE alkstore.jobs SET attempts = max_attempts WHERE id = ANY(:ids)", ids=held_ids
    )
    before = tables(admin)
    with slow(admin, "dead_jobs", "INSERT"), pytest.raises(DBAPIError) as caught:
        q.sweep_expired()
    assert state_of(caught.value) == QUERY_CANCELED
    assert tables(admin) == before
    # Without the trigger each of them goes through.
    q.sweep_expired()
    assert q.stats().processing == 0 and q.stats().dead == 8


def test_r_timeouts_a_claim_whose_park_is_cancelled_claims_nothing(
    make_store: Any, admin: Engine
) -> None:
    """A claim also parks expired rows (S3), once a second per queue object, in a
    statement of its own.  When that park is cancelled, the claim raises having
    claimed nothing: no job left processing that no caller was handed."""
    sql(
        admin,
        "CREATE FUNCTION alkstore.slow_park() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_sleep(0.4); RETURN NEW; END $$",
    )
    sql(
        admin,
        "CREATE TRIGGER slow_park BEFORE UPDATE ON alkstore.jobs FOR EACH ROW "
        "WHEN (NEW.parked AND NOT OLD.parked) EXECUTE FUNCTION alkstore.slow_park()",
    )
    s = make_store(statement_timeout="150ms")
    q = s.queue("park")
    due = q.enqueue_many([b"1", b"2", b"3"])
    stale = q.enqueue(b"old", EnqueueOpts(priority=5, expires_in=60))
    expire(admin, stale)
    before = tables(admin)
    with pytest.raises(DBAPIError) as caught:
        q.claim_batch("w", 10)
    assert state_of(caught.value) == QUERY_CANCELED
    assert tables(admin) == before  # nothing claimed, nothing parked
    # The next claim (no park due for a second) hands the jobs out.
    assert [h.id for h in q.claim_batch("w", 10)] == due


# -- the worker: transient, never a crash ----------------------------------------


def _claim_failed(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        "claim on w failed" in r.getMessage() and "lock timeout" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )


def _worker(kind: str, fn: Callable[..., Any], **kw: Any) -> Callable[[Any], Any]:
    def build(store: Any) -> Worker | AsyncWorker:
        cls = Worker if kind == "sync" else AsyncWorker
        return cls(
            {store.queue("w"): fn},
            concurrency=4,
            poll_interval=timedelta(milliseconds=50),
            sweep_interval=timedelta(milliseconds=100),
            vacuum_interval=None,
            handle_signals=False,
            **kw,
        )

    return build


@pytest.mark.parametrize("kind", KINDS)
def test_r_timeouts_a_worker_backs_off_while_lock_timeout_fails_its_claims_and_goes_on(
    kind: str, database_url: URL, admin: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    done: list[int] = []
    lock = threading.Lock()

    def record(job: Job) -> None:
        with lock:
            done.append(job.id)

    caplog.set_level(logging.WARNING, logger="alkstore_sa.worker")
    running = start_worker(
        kind,
        database_url,
        _worker(kind, handler(kind, record)),
        **engine_kw(kind, lock_timeout="30ms", statement_timeout="2s"),
    )
    seed = Store(create_engine(database_url, poolclass=NullPool))
    try:
        wait_for(lambda: running.worker.health().listener_connected)
        seed.queue("w").enqueue(b"before")
        wait_for(lambda: len(done) == 1)
        # A long operation holds the table: every claim, sweep and ack waits
        # and gives up after lock_timeout, for about half a second.
        with held(admin, "LOCK TABLE alkstore.jobs IN ACCESS EXCLUSIVE MODE"):
            # (An enqueue would wait for the lock too: the jobs go in after it.)
            # Held until a claim has failed on it: the errors of the first job's
            # ack alone (retried faster than the re-poll) are not what is pinned.
            wait_for(lambda: _claim_failed(caplog), timeout=10)
            assert running.worker.health().db_errors >= 1
            assert running.worker.health().running
        seed.queue("w").enqueue_many([b"%d" % i for i in range(20)])
        wait_for(lambda: len(done) == 21, timeout=15)
        wait_for(lambda: running.worker.health().db_errors == 0, timeout=10)
        assert running.worker.health().running
    finally:
        running.stop()
        seed.close()
        seed.engine.dispose()
    assert sorted(set(done)) == sorted(done)  # each ran once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("claim on w failed" in m and "lock timeout" in m for m in warnings), warnings


def _idle_timeout_after_first_connect(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``build`` on a store whose engine sets a 250 ms idle-in-transaction timeout
    on each new connection once SQLAlchemy's first-connect queries are done.

    Given at connect time (``engine_kw``), a timeout this short can end the
    dialect's own first-connect transaction on a loaded machine (seen in CI:
    the worker then failed its start, not the handler's session)."""

    def with_timeout(store: Any) -> Any:
        engine = getattr(store.engine, "sync_engine", store.engine)

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("SET idle_in_transaction_session_timeout = '250ms'")
            cursor.close()
            dbapi_connection.commit()

        # Pool "connect" listeners run after the engine's first-connect one.
        sa_event.listen(engine, "connect", on_connect)
        return build(store)

    return with_timeout


@pytest.mark.parametrize("kind", KINDS)
def test_r_timeouts_a_session_handler_killed_idle_in_transaction_is_retried(
    kind: str, database_url: URL, admin: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """idle_in_transaction_session_timeout ends a session handler's connection: the
    ack in that session cannot land, its writes are gone, and the job is retried
    on another connection (the claim is the worker's, on its own connection).

    Under load a retry may also sit idle past the timeout (between its insert and
    its ack) and be killed in turn: every killed attempt's write is gone, and only
    the attempt whose ack landed left its row."""
    sql(admin, "CREATE TABLE public.effects (job_id bigint, attempt int)")
    caplog.set_level(logging.WARNING, logger="alkstore_sa.worker")
    calls: list[int] = []

    if kind == "sync":

        def slow_then_fast(job: Job, session: Any) -> None:
            calls.append(job.attempts)
            session.execute(
                text("INSERT INTO public.effects VALUES (:j, :a)"),
                {"j": job.id, "a": job.attempts},
            )
            if job.attempts == 1:
                time.sleep(0.6)  # idle in the transaction, past the timeout

        fn: Callable[..., Any] = slow_then_fast
    else:

        async def slow_then_fast_async(job: Job, session: Any) -> None:
            calls.append(job.attempts)
            await session.execute(
                text("INSERT INTO public.effects VALUES (:j, :a)"),
                {"j": job.id, "a": job.attempts},
            )
            if job.attempts == 1:
                await asyncio.sleep(0.6)

        fn = slow_then_fast_async

    running = start_worker(kind, database_url, _idle_timeout_after_first_connect(_worker(kind, fn)))
    seed = Store(create_engine(database_url, poolclass=NullPool))
    try:
        job_id = seed.queue("w").enqueue(b"job")
        wait_for(lambda: seed.queue("w").get_job(job_id) is None, timeout=15)
        assert running.worker.health().running
    finally:
        running.stop()
        seed.close()
        seed.engine.dispose()
    # The first attempt's write died with its session; the last committed with its ack.
    assert calls == list(range(1, len(calls) + 1)) and len(calls) >= 2, calls
    assert sql(admin, "SELECT job_id, attempt FROM public.effects") == [
        {"job_id": job_id, "attempt": calls[-1]}
    ]
    # The retry says why: the server's own words, in the log (and the job's error
    # history).  asyncpg reads no reason off a connection the server ended: it
    # says the connection is closed.
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    why = "connection is closed" if kind == "asyncpg" else "idle-in-transaction timeout"
    assert retried and why in retried[0], retried
