"""Q1-Q3: queue handles are names, names and options are checked before SQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, EnqueueOpts, InvalidNameError, QueueOpts, Store

from .._sqlspy import SqlSpy, sync_engine_of

# Nothing listens on port 9 of the loopback: any connection attempt fails.
NOWHERE = "postgresql+psycopg://nobody:secret@127.0.0.1:9/nowhere"


@pytest.fixture
def spy(qs: Any) -> Iterator[SqlSpy]:
    s = SqlSpy(sync_engine_of(qs))
    yield s
    s.close()


@pytest.fixture
def any_sql(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement any connection in this process sends while the test runs.

    Recorded at the driver (psycopg's cursors), under both of the store's
    execution paths.  Not with a SQLAlchemy event on the ``Engine`` class:
    that flags every engine as observed for the rest of the process, so
    later tests would never take the store's cursor path.
    """
    sent: list[str] = []
    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        for name in ("execute", "executemany"):
            original = getattr(cls, name)

            def record(self: Any, query: Any, *args: Any, _original: Any = original) -> Any:
                sent.append(str(query))
                return _original(self, query, *args)

            monkeypatch.setattr(cls, name, record)
    yield sent


def test_any_sql_records_both_execution_paths(any_sql: list[str], qs: Any) -> None:
    # The "no SQL ran" checks below are only as good as this recorder.
    q = qs.queue("recorded")
    q.enqueue(b"x")
    assert q.claim_one("w") is not None
    assert len(any_sql) >= 2


# -- Q1 ------------------------------------------------------------------------


def test_q1_queue_on_an_engine_that_points_nowhere_connects_to_nothing() -> None:
    engine = create_engine(NOWHERE)
    connects: list[object] = []
    event.listen(engine, "do_connect", lambda *a: connects.append(a))
    store = Store(engine)
    opts = QueueOpts(max_attempts=3, visibility_timeout=5)
    q = store.queue("emails", opts)
    assert (q.name, q.opts) == ("emails", opts)
    assert connects == []
    # The control: an operation does try to connect, and cannot.
    with pytest.raises(OperationalError):
        q.get_job(1)
    assert connects
    engine.dispose()


async def test_q1_async_queue_on_an_engine_that_points_nowhere_connects_to_nothing() -> None:
    engine = create_async_engine(NOWHERE)
    connects: list[object] = []
    event.listen(engine.sync_engine, "do_connect", lambda *a: connects.append(a))
    store = AsyncStore(engine)
    q = store.queue("emails", QueueOpts(priority=4))
    assert q.name == "emails" and q.opts.priority == 4
    assert connects == []
    with pytest.raises(OperationalError):
        await q.get_job(1)
    assert connects
    await engine.dispose()


def test_q1_queue_runs_no_sql(qs: Any, spy: SqlSpy) -> None:
    with spy.no_sql():
        for name in ("a", "b", "emails", "a"):
            qs.queue(name, QueueOpts(max_attempts=2))
    # The control: the counter does see an operation's statement.
    qs.queue("a").get_job(1)
    assert spy.count >= 1


def test_q1_handle_carries_its_opts_and_defaults(qs: Any) -> None:
    opts = QueueOpts(priority=3, max_attempts=7, visibility_timeout=timedelta(seconds=2))
    assert qs.queue("x", opts).opts is opts
    assert qs.queue("x").opts == QueueOpts()
    assert qs.queue("x", opts).opts.visibility_timeout == 2.0  # normalised to seconds


def test_q1_two_handles_on_one_name_are_one_queue(qs: Any) -> None:
    fast = qs.queue("shared", QueueOpts(priority=9))
    slow = qs.queue("shared", QueueOpts(priority=-9, max_attempts=1))
    job_id = fast.enqueue(b"one queue")
    handle = slow.claim_one("w")
    assert handle is not None and handle.id == job_id
    assert handle.job.priority == 9  # stamped by the handle that enqueued it


# -- Q2 ------------------------------------------------------------------------

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("a" * 64, id="64-ascii-bytes"),
    pytest.param("é" * 32, id="64-bytes-in-32-chars"),
    pytest.param("€" * 22, id="66-bytes-in-22-chars"),
    pytest.param("🙂" * 16, id="64-bytes-in-16-emoji"),
    pytest.param("a b", id="space"),
    pytest.param(" lead", id="leading-space"),
    pytest.param("trail ", id="trailing-space"),
    pytest.param("a\tb", id="tab"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\u00a0b", id="nbsp"),
    pytest.param("a\u3000b", id="ideographic-space"),
    pytest.param("a\u2028b", id="line-separator"),
    pytest.param("a\x00b", id="Cc-nul"),
    pytest.param("a\x07", id="Cc-bell"),
    pytest.param("\x7f", id="Cc-del"),
    pytest.param("a\x9fb", id="Cc-c1"),
    pytest.param("a\u200bb", id="Cf-zero-width-space"),
    pytest.param("a\u200db", id="Cf-zwj"),
    pytest.param("\ufeffa", id="Cf-bom"),
    pytest.param("a\u00adb", id="Cf-soft-hyphen"),
    pytest.param("a\u202eb", id="Cf-rtl-override"),
    pytest.param("a\U000e0001", id="Cf-language-tag"),
    pytest.param("alkstore", id="reserved-alkstore"),
    pytest.param("alkstore_jobs", id="reserved-alkstore-prefix"),
    pytest.param("ALKSTORE", id="reserved-upper"),
    pytest.param("AlkStore-x", id="reserved-mixed"),
    pytest.param("pg_", id="reserved-pg"),
    pytest.param("pg_notify", id="reserved-pg-prefix"),
    pytest.param("PG_x", id="reserved-PG"),
    pytest.param("Pg_x", id="reserved-Pg"),
    pytest.param(None, id="none"),
    pytest.param(5, id="int"),
    pytest.param(b"emails", id="bytes"),
]

GOOD_NAMES = [
    "a",
    "a" * 63,
    "é" * 31 + "a",  # exactly 63 bytes
    "€" * 21,  # exactly 63 bytes
    "🙂" * 15 + "abc",  # exactly 63 bytes
    "pg",
    "pgx",
    "_pg_x",
    "my_alkstore",
    "alk-store",
    "emails.v2:high/priority",
    "'; DROP TABLE alkstore.jobs; --".replace(" ", "_"),
]


def test_q2_invalid_queue_names_raise_before_sql(qs: Any, spy: SqlSpy) -> None:
    for param in BAD_NAMES:
        (name,) = param.values
        with spy.no_sql(), pytest.raises(InvalidNameError) as info:
            qs.queue(name)
        assert isinstance(info.value, ValueError), param.id


def test_q2_valid_queue_names_round_trip(qs: Any) -> None:
    for name in GOOD_NAMES:
        q = qs.queue(name)
        job_id = q.enqueue(b"ok")
        job = q.get_job(job_id)
        assert job is not None and job.queue == name
        handle = q.claim_one("w")
        assert handle is not None and handle.id == job_id
        assert len(q.channel.encode()) <= 63


BAD_WORKERS: list[object] = ["", " ", "\t\n ", "\u3000", "\u00a0", None, 7]


def test_q2_invalid_worker_id_on_claim_one(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("w")
    job_id = q.enqueue(b"x")
    for worker in BAD_WORKERS:
        with spy.no_sql(), pytest.raises(InvalidNameError):
            q.claim_one(worker)
    job = q.get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0


def test_q2_invalid_worker_id_on_claim_batch(qs: Any, spy: SqlSpy) -> None:
    # Checked even when n <= 0 would return [] without SQL: a bad argument is an error.
    q = qs.queue("w")
    job_id = q.enqueue(b"x")
    for n in (1, 10, 0, -1):
        for worker in BAD_WORKERS:
            with spy.no_sql(), pytest.raises(InvalidNameError):
                q.claim_batch(worker, n)
    job = q.get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0


def test_q2_worker_id_with_some_non_space_is_stored_verbatim(qs: Any) -> None:
    q = qs.queue("w")
    for worker in ["w", " w", "host-1 pid 42", "é漢🙂", "x" * 200]:  # 200: the longest
        q.enqueue(b"x")
        handle = q.claim_one(worker)
        assert handle is not None and handle.job.worker_id == worker
        job = q.get_job(handle.id)
        assert job is not None and job.worker_id == worker


# -- Q3 ------------------------------------------------------------------------

NAIVE = datetime(2030, 1, 1, 12, 0)

BAD_QUEUE_OPTS: list[Any] = [
    pytest.param({"max_attempts": 0}, ValueError, id="max_attempts-0"),
    pytest.param({"max_attempts": -3}, ValueError, id="max_attempts-negative"),
    pytest.param({"max_attempts": 2.0}, TypeError, id="max_attempts-float"),
    pytest.param({"max_attempts": True}, TypeError, id="max_attempts-bool"),
    pytest.param({"visibility_timeout": 0}, ValueError, id="vt-0"),
    pytest.param({"visibility_timeout": -1}, ValueError, id="vt-negative"),
    pytest.param({"visibility_timeout": timedelta(0)}, ValueError, id="vt-td-0"),
    pytest.param({"visibility_timeout": timedelta(seconds=-5)}, ValueError, id="vt-td-neg"),
    pytest.param({"visibility_timeout": float("nan")}, ValueError, id="vt-nan"),
    pytest.param({"visibility_timeout": float("inf")}, ValueError, id="vt-inf"),
    pytest.param({"visibility_timeout": "30"}, TypeError, id="vt-str"),
    pytest.param({"visibility_timeout": 1e-9}, ValueError, id="vt-below-a-microsecond"),
    pytest.param({"expires_in": 0}, ValueError, id="expires_in-0"),
    pytest.param({"expires_in": -1.5}, ValueError, id="expires_in-negative"),
    pytest.param({"retry_base": 0}, ValueError, id="retry_base-0"),
    pytest.param({"retry_base": -1}, ValueError, id="retry_base-negative"),
    pytest.param({"retry_cap": 0}, ValueError, id="retry_cap-0"),
    pytest.param({"retry_cap": 3600.5}, ValueError, id="retry_cap-over-3600"),
    pytest.param({"retry_cap": timedelta(hours=2)}, ValueError, id="retry_cap-td-over"),
    pytest.param({"dead_letter_retention": -1}, ValueError, id="retention-negative"),
    pytest.param({"priority": "1"}, TypeError, id="priority-str"),
    pytest.param({"priority": 2**31}, ValueError, id="priority-over-int4"),
    pytest.param({"visibility_timeout": 10**400}, ValueError, id="vt-huge-int"),
]


@pytest.mark.parametrize(("kwargs", "exc"), BAD_QUEUE_OPTS)
def test_q3_bad_queue_opts_raise(any_sql: list[str], kwargs: dict[str, Any], exc: type) -> None:
    with pytest.raises(exc):
        QueueOpts(**kwargs)
    assert any_sql == []


BAD_ENQUEUE_OPTS: list[Any] = [
    pytest.param({"run_at": NAIVE}, ValueError, id="naive-run_at"),
    pytest.param({"run_at": "2030-01-01T00:00:00Z"}, TypeError, id="str-run_at"),
    pytest.param({"delay": -1}, ValueError, id="delay-negative"),
    pytest.param({"delay": float("nan")}, ValueError, id="delay-nan"),
    pytest.param({"expires_in": 0}, ValueError, id="expires_in-0"),
    pytest.param({"max_attempts": 0}, ValueError, id="max_attempts-0"),
    pytest.param({"priority": -(2**31) - 1}, ValueError, id="priority-under-int4"),
    pytest.param({"priority": 1.5}, TypeError, id="priority-float"),
]


@pytest.mark.parametrize(("kwargs", "exc"), BAD_ENQUEUE_OPTS)
def test_q3_bad_enqueue_opts_raise(any_sql: list[str], kwargs: dict[str, Any], exc: type) -> None:
    with pytest.raises(exc):
        EnqueueOpts(**kwargs)
    assert any_sql == []


def test_q3_boundary_opts_are_accepted() -> None:
    QueueOpts(max_attempts=1, visibility_timeout=0.001, retry_cap=3600, retry_base=0.5)
    QueueOpts(dead_letter_retention=0, retry_cap=timedelta(hours=1))
    EnqueueOpts(delay=0, run_at=datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=-7))))


def test_q3_non_bytes_payload_is_a_type_error_before_sql(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("p")
    for payload in ["text", None, 5, [1, 2], bytearray(b"x").decode(), object()]:
        with spy.no_sql(), pytest.raises(TypeError):
            q.enqueue(payload)
    assert q.claim_one("w") is None


def test_q3_one_bad_payload_in_a_batch_enqueues_nothing(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("p")
    with spy.no_sql(), pytest.raises(TypeError):
        q.enqueue_many([b"ok", b"fine", "not bytes"])
    with spy.no_sql(), pytest.raises(TypeError):
        q.enqueue_many(b"a single payload is not a batch")
    assert q.claim_one("w") is None


def test_q3_opts_of_the_wrong_type_raise_before_sql(qs: Any, spy: SqlSpy) -> None:
    with spy.no_sql():
        with pytest.raises(TypeError):
            qs.queue("p", {"max_attempts": 3})
        q = qs.queue("p")
        with pytest.raises(TypeError):
            q.enqueue(b"x", {"delay": 1})
        with pytest.raises(TypeError):
            q.enqueue(b"x", QueueOpts())
        with pytest.raises(TypeError):
            q.enqueue_many([b"x"], {"delay": 1})


def test_q3_bad_queue_method_arguments_raise_before_sql(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("p")
    with spy.no_sql():
        with pytest.raises(TypeError):
            q.claim_batch("w", "2")
        with pytest.raises(TypeError):
            q.claim_batch("w", 1.0)
        with pytest.raises(TypeError):
            q.ack_batch(["1"])
        with pytest.raises(TypeError):
            q.ack_batch("12")
        with pytest.raises(TypeError):
            q.cancel("1")
        with pytest.raises(TypeError):
            q.get_job(None)
        with pytest.raises(ValueError):
            q.get_job(2**63)


def test_q3_bad_handle_arguments_raise_before_sql_and_consume_nothing(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("p")
    q.enqueue(b"x")
    handle = q.claim_one("w")
    assert handle is not None
    with spy.no_sql():
        for bad in (0, -1, float("nan"), "5", None, timedelta(0)):
            with pytest.raises((TypeError, ValueError)):
                handle.heartbeat(bad)
        with pytest.raises(ValueError):
            handle.retry("e", delay=-1)
        with pytest.raises(TypeError):
            handle.retry("e", delay="soon")
        with pytest.raises(TypeError):
            handle.retry(error=5)
        with pytest.raises(TypeError):
            handle.fail(error=b"bytes")
        with pytest.raises(ValueError):
            handle.fail("nul\x00inside")
    assert handle.heartbeat(5) is True
    assert handle.ack() is True
