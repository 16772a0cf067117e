"""Every statement the package sends carries its values as bound parameters.

The "Shape" rules (docs/semantics.md): no hand-built SQL strings with values
pasted in, ever.  We run
every public operation (and the worker-oriented batched calls) with
distinctive marker values, record each ``(statement, parameters)`` from
``before_cursor_execute``, and check that no marker ever appears in the SQL
text, that each marker did travel (in the parameters), that the SQL text
holds no string literal at all, and that ``pg_notify``'s channel argument is
a parameter (Q7).

The only identifier ever rendered into SQL text is the schema name, through
``schema_translate_map``; it is validated as a plain identifier
(``[A-Za-z_][A-Za-z0-9_]*``) before a store exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import URL, Engine, text
from sqlalchemy.orm import Session

from alkstore_sa import (
    AsyncWorker,
    EnqueueOpts,
    FailJob,
    InvalidNameError,
    Job,
    QueueOpts,
    RetryJob,
    Store,
    Worker,
)

from .._sqlspy import SqlSpy, sync_engine_of
from .._workers import KINDS, handler, start_worker, wait_for


def _statuses_out(statement: str) -> str:
    """``statement`` less its ``status = 'pending'`` / ``'processing'`` literals."""
    return re.sub(r"(status(?: = | != |=))'(pending|processing)'", r"\1", statement)


QUEUE = "q_marker_7f3"
WORKER = "w_marker_9c1"
PAYLOAD = b"payload_marker_5e2"
FAIL_ERROR = "err_marker_a41'); DROP TABLE alkstore.jobs; --"
RETRY_ERROR = 'retry_marker_b52 $$ " \\'
UNIQUE_KEY = "key_marker_c63'); DROP TABLE alkstore.jobs; --"
UNKNOWN_ID = 987654321987
RUN_AT = datetime(2031, 7, 13, 1, 2, 3, tzinfo=UTC)

# Numbers chosen so their text cannot occur in SQL by accident.
QUEUE_OPTS = QueueOpts(
    priority=48213,
    max_attempts=9137,
    visibility_timeout=4321.25,
    expires_in=77771.5,
    retry_base=3.5,
    retry_cap=3599.5,
    dead_letter_retention=55551.5,
)
JOB_OPTS = EnqueueOpts(priority=51977, expires_in=66661.5, max_attempts=8123)
DELAYED = EnqueueOpts(delay=33331.5)
AT = EnqueueOpts(run_at=RUN_AT)
HEARTBEAT_EXTEND = 22221.75
RETRY_DELAY = 11111.5
LIST_LIMIT = 743
REQUEUE_LIMIT = 9431
OLDER_THAN = 44441.5

TEXT_MARKERS = ["marker_7f3", "marker_9c1", "marker_5e2", "marker_a41", "marker_b52", "marker_c63"]
NUMBER_MARKERS = [
    "48213",
    "9137",
    "4321",
    "77771",
    "3599",
    "55551",
    "51977",
    "66661",
    "8123",
    "22221",
    "11111",
    "33331",
    str(UNKNOWN_ID),
    "2031",
    "743",
    "9431",
    "44441",
]


@pytest.fixture
def spy(qs: Any) -> Iterator[SqlSpy]:
    s = SqlSpy(sync_engine_of(qs))
    yield s
    s.close()


def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _flatten(v)
    else:
        yield getattr(value, "obj", value)  # psycopg's Binary wraps bytes in .obj


def _exercise(qs: Any) -> Any:
    """Every public queue and handle operation, each with marker values."""
    q = qs.queue(QUEUE, QUEUE_OPTS)
    ids = [
        q.enqueue(PAYLOAD),
        q.enqueue(PAYLOAD, JOB_OPTS),
        *q.enqueue_many([PAYLOAD, PAYLOAD], JOB_OPTS),
    ]
    q.enqueue(PAYLOAD, DELAYED)
    q.enqueue(PAYLOAD, AT)
    # U1: keyed inserts, and the look-up of a live key (all delayed: not claimed below).
    keyed = EnqueueOpts(delay=33331.5, unique_key=UNIQUE_KEY)
    assert q.enqueue(PAYLOAD, keyed) == q.enqueue(PAYLOAD, keyed)
    q.enqueue_many([PAYLOAD, PAYLOAD], DELAYED, unique_keys=[UNIQUE_KEY, UNIQUE_KEY + "2"])

    handles = q.claim_batch(WORKER, 4)
    assert sorted(h.id for h in handles) == sorted(ids)
    first, second, third, fourth = handles
    assert first.heartbeat(HEARTBEAT_EXTEND) is True
    assert first.retry(RETRY_ERROR, RETRY_DELAY) is True
    assert second.retry(RETRY_ERROR) is True  # on the queue's backoff curve
    assert third.fail(FAIL_ERROR) is True
    assert q.ack_batch([fourth.id, UNKNOWN_ID]) == 1

    assert q.get_job(third.id) is not None
    assert q.get_job(UNKNOWN_ID) is None
    assert q.cancel(first.id) is True
    assert q.cancel(UNKNOWN_ID) is False
    assert q.claim_one(WORKER) is None  # the rest is not due yet
    q.sweep_expired()

    # The worker runtime's batched calls (Q27): ack/heartbeat many claims, release.
    q.enqueue_many([PAYLOAD] * 3)
    held = q.claim_batch(WORKER, 3)
    claims = [(h.id, h.job.attempts) for h in held]
    core = q._core
    assert sorted(qs._run(core.heartbeat_claims(claims))) == sorted(i for i, _ in claims)
    assert qs._run(core.release(*claims[0])) == "released"
    assert sorted(qs._run(core.ack_claims(claims[1:]))) == sorted(i for i, _ in claims[1:])

    # The operations on the queue as a whole (O1-O6).
    assert q.jobs("dead", limit=LIST_LIMIT, before=UNKNOWN_ID)[0].id == third.id
    assert q.jobs(limit=LIST_LIMIT)
    assert q.requeue_dead([third.id, UNKNOWN_ID], limit=REQUEUE_LIMIT) == 1
    assert q.requeue_dead(limit=REQUEUE_LIMIT) == 0
    assert q.purge_dead([UNKNOWN_ID], older_than=OLDER_THAN) == 0
    assert q.purge_dead(older_than=OLDER_THAN) == 0
    assert q.purge_dead() == 0
    assert q.pause() is True
    assert q.stats().paused is True
    assert q.resume() is True
    assert QUEUE in qs.queue_names()
    assert qs.stats()[QUEUE].queue == QUEUE
    return q


def test_shape_every_statement_binds_its_values_and_pastes_none(qs: Any, spy: SqlSpy) -> None:
    q = _exercise(qs)
    sent = spy.statements
    assert len(sent) >= 20

    for statement, _params in sent:
        for marker in TEXT_MARKERS + NUMBER_MARKERS:
            assert marker not in statement, f"{marker!r} pasted into SQL: {statement}"
        # No constant is pasted either ('dead', 'expired', ... are parameters), but
        # the two job statuses the partial indexes name (issue 30: generic plans).
        assert "'" not in _statuses_out(statement), f"a string literal in SQL text: {statement}"

    travelled = {v for _s, params in sent for v in _flatten(params)}
    for value in (
        QUEUE,
        WORKER,
        PAYLOAD,
        FAIL_ERROR,
        RETRY_ERROR,
        UNIQUE_KEY,
        UNKNOWN_ID,
        RUN_AT,
        q.channel,
    ):
        assert value in travelled, f"{value!r} never reached the database as a parameter"
    for seconds in (4321.25, 77771.5, 66661.5, 33331.5, HEARTBEAT_EXTEND, RETRY_DELAY, 55551.5):
        assert timedelta(seconds=seconds) in travelled
    assert timedelta(seconds=OLDER_THAN) in travelled
    for number in (48213, 9137, 51977, 8123, LIST_LIMIT, REQUEUE_LIMIT):
        assert number in travelled


def test_q7_pg_notify_channel_is_a_bound_parameter(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue(QUEUE)
    q.enqueue(PAYLOAD)
    q.enqueue_many([PAYLOAD, PAYLOAD])
    notifies = [(s, p) for s, p in spy.statements if "pg_notify" in s]
    assert len(notifies) == 2
    for statement, params in notifies:
        [call] = re.findall(r"pg_notify\(([^,]*),", statement)
        # psycopg's named placeholders, or asyncpg's numbered ones (D1).
        bound = re.fullmatch(r"(?:%\((\w+)\)s|\$(\d+))(::\w+)?", call.strip())
        assert bound, f"pg_notify's channel is not a parameter: {call!r}"
        name, number = bound.group(1), bound.group(2)
        assert (params[name] if name else params[int(number) - 1]) == q.channel


def test_q7_hostile_queue_name_reaches_pg_notify_only_as_a_parameter(qs: Any, spy: SqlSpy) -> None:
    """A queue name full of SQL is a legal name (Q2) and stays a value."""
    name = 'x\');SELECT"pg_sleep"(9);--'
    q = qs.queue(name)
    job_id = q.enqueue(PAYLOAD)
    job = q.get_job(job_id)
    assert job is not None and job.queue == name
    for statement, _params in spy.statements:
        assert "pg_sleep" not in statement
    assert q.channel == f"alkstore.{name}"


def test_q2_schema_is_the_only_rendered_name_and_only_plain_identifiers_pass(
    engine: Engine,
) -> None:
    for hostile in ['x"; DROP TABLE t; --', "a b", "a.b", "1abc", "", "pg_temp", "é"]:
        with pytest.raises(InvalidNameError):
            Store(engine, schema=hostile)


def test_q6_session_path_binds_values_too(engine: Engine) -> None:
    spy = SqlSpy(engine)
    try:
        with Store(engine) as store, Session(engine) as session:
            q = store.queue(QUEUE, QUEUE_OPTS)
            job_id = q.enqueue(PAYLOAD, JOB_OPTS, session=session)
            with engine.connect() as conn:
                q.enqueue_many([PAYLOAD], DELAYED, session=conn)
                conn.commit()
            session.commit()
            [handle] = q.claim_batch(WORKER, 1)
            assert handle.id == job_id
            with Session(engine) as s2:
                assert handle.ack(session=s2) is True
                s2.commit()
    finally:
        spy.close()
    assert spy.statements
    for statement, _params in spy.statements:
        for marker in TEXT_MARKERS + NUMBER_MARKERS:
            assert marker not in statement


HOSTILE_QUEUE = 'q_marker_7f3";UNLISTEN/**/*;--'
LISTEN_QUERY = """
SELECT query FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %' AND application_name = :app
"""


def _state(job: Job | None) -> tuple[str, int] | None:
    return None if job is None else (job.status, job.attempts)


@pytest.mark.parametrize("kind", KINDS)
def test_q26_worker_binds_values_and_listens_on_a_quoted_hostile_channel(
    kind: str, database_url: URL, store: Store
) -> None:
    """The runtime's statements bind their values; its LISTEN quotes the channel
    as an identifier, so a queue name with quotes and semicolons still wakes it."""
    opts = QueueOpts(max_attempts=9137, visibility_timeout=4321.25)
    spies: list[SqlSpy] = []

    def work(job: Job) -> None:
        if job.payload == b"fail":
            raise FailJob(FAIL_ERROR)
        if job.payload == b"retry":
            raise RetryJob(RETRY_ERROR, delay=RETRY_DELAY)

    def build(s: Any) -> Worker | AsyncWorker:
        spies.append(SqlSpy(sync_engine_of(s)))
        cls = Worker if kind == "sync" else AsyncWorker
        # A re-poll far away: only the wake on the quoted channel can bring jobs in.
        return cls(
            {s.queue(HOSTILE_QUEUE, opts): handler(kind, work)},
            poll_interval=60,
            worker_id=WORKER,
            handle_signals=False,
        )

    running = start_worker(kind, database_url, build)
    try:

        def listening() -> Any:
            # A connection per look: pg_stat_activity is a snapshot per transaction.
            with store.engine.connect() as conn:
                return conn.execute(text(LISTEN_QUERY), {"app": f"alkstore {WORKER}"}).scalar()

        # The store's control channel (C1) is LISTENed first, the queue's last:
        # pg_stat_activity shows the last LISTEN sent, so wait for the queue's.
        quoted = 'LISTEN "alkstore.q_marker_7f3"";UNLISTEN/**/*;--"'
        wait_for(lambda: listening() == quoted)
        q = store.queue(HOSTILE_QUEUE, opts)
        ok, failed, retried = (q.enqueue(p) for p in (b"ok", b"fail", b"retry"))
        wait_for(lambda: q.get_job(ok) is None, timeout=10)
        wait_for(lambda: q.get_job(failed).status == "dead", timeout=10)  # type: ignore[union-attr]
        # Pending again after its attempt (pending before it, too: not enough).
        wait_for(lambda: _state(q.get_job(retried)) == ("pending", 1), timeout=10)
    finally:
        running.stop()
        for spy in spies:
            spy.close()
    assert q.get_job(failed).last_error == FAIL_ERROR  # type: ignore[union-attr]
    assert q.get_job(retried).last_error == RETRY_ERROR  # type: ignore[union-attr]
    [spy] = spies
    assert len(spy.statements) >= 3  # claims, the ack, the fail and the retry
    for statement, _params in spy.statements:
        for marker in TEXT_MARKERS + NUMBER_MARKERS:
            assert marker not in statement, f"{marker!r} pasted into SQL: {statement}"
        assert "'" not in _statuses_out(statement), f"a string literal in SQL text: {statement}"
