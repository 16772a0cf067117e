"""Hypothesis fuzzing of every public input (Q2, Q3, Q5, Q13, Q17-Q20).

Properties, for both the sync and the async face:

- a refused input raises only the documented exceptions
  (``InvalidNameError``, ``ValueError``, ``TypeError``) and sends no SQL
  (counted with a ``before_cursor_execute`` listener);
- an accepted input is accepted by PostgreSQL too, and what was stored
  comes back verbatim through ``get_job`` (names, worker ids, payloads,
  error strings);
- nothing is lost: every enqueued job is found, and a drain claims it.

Error strings containing NUL are refused with ``ValueError`` before SQL:
PostgreSQL ``text`` cannot hold NUL, and silently truncating or escaping an
error would break "verbatim".  Worker ids with NUL are refused the same way.
"""

from __future__ import annotations

import itertools
import random
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from alkstore_sa import EnqueueOpts, InvalidNameError, QueueOpts

from .._sqlspy import SqlSpy, sync_engine_of

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one database serves all examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

HOSTILE = [
    "'; DROP TABLE alkstore.jobs; --",
    '" OR 1=1 --',
    "$$; SELECT pg_sleep(10); $$",
    "x'); DELETE FROM alkstore.dead_jobs; --",
    "q\\'",
    "%s",
    "%(p_queue)s",
    ":p_queue",
    "{}",
    "E'\\x00'",
    "\u202eevil",
    "\ufeffbom",
    "Ω≈ç√∫",
    "🙂" * 15,
    "a" * 63,
    "a" * 64,
    "é" * 31,
    "é" * 32,
    "pg_x",
    "PG_x",
    "Alkstore",
    "ALKSTORE_q",
    "alkstorex",
    "ǅalkstore",
    "a\x00b",
    "tab\there",
    "new\nline",
    "\u200bzero-width",
]

_uniq = itertools.count()


@pytest.fixture
def spy(qs: Any) -> Iterator[SqlSpy]:
    s = SqlSpy(sync_engine_of(qs))
    yield s
    s.close()


def _documented(exc: BaseException) -> bool:
    return isinstance(exc, InvalidNameError | ValueError | TypeError)


# -- oracles: docs/semantics.md's rules written independently of alkstore_sa._values.validate --


def name_ok(name: object) -> bool:
    """Q2, as docs/semantics.md words it (the rules hold for the name's NFC form)."""
    if not isinstance(name, str) or not name:
        return False
    name = unicodedata.normalize("NFC", name)
    if len(name.encode("utf-8")) > 63:
        return False
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in name):
        return False
    lowered = name.lower()
    return not (lowered.startswith("alkstore") or lowered.startswith("pg_"))


def worker_ok(wid: object) -> bool:
    return isinstance(wid, str) and bool(wid) and not wid.isspace() and "\x00" not in wid


def _drain(q: Any, worker: str = "fuzz-drain") -> list[int]:
    """Claim everything claimable in ``q`` and ack it; returns the claimed ids."""
    ids: list[int] = []
    while handles := q.claim_batch(worker, 500):
        ids += [h.id for h in handles]
        q.ack_batch([h.id for h in handles])
    return ids


names = st.one_of(
    st.text(max_size=70),
    st.sampled_from(HOSTILE),
    st.builds(
        lambda p, s: p + s,
        st.sampled_from(["alkstore", "ALKSTORE", "AlKsToRe", "pg_", "PG_", "Pg_"]),
        st.text(max_size=5),
    ),
    st.text(alphabet="é漢🙂a'\";", min_size=14, max_size=40),  # the 63-byte boundary
    st.integers() | st.binary(max_size=5) | st.none(),
)


@FUZZ
@given(name=names)
@example(name="é" * 31)  # 62 bytes
@example(name="é" * 31 + "a")  # 63 bytes: the longest allowed
@example(name="é" * 32)  # 64 bytes: refused although 32 characters
@example(name="\uf900")  # a compatibility ideograph: its NFC form is another code point
def test_q2_fuzzed_queue_name_is_refused_without_sql_or_round_trips(
    qs: Any, spy: SqlSpy, name: object
) -> None:
    if not name_ok(name):
        with spy.no_sql(), pytest.raises(InvalidNameError):
            qs.queue(name)
        return
    q = qs.queue(name)
    # The queue is the name as it looks: its NFC form (U+F900 is U+8C48's twin).
    assert isinstance(name, str)
    assert q.name == unicodedata.normalize("NFC", name)
    assert len(q.channel.encode("utf-8")) <= 63
    job_id = q.enqueue(b"n")
    job = q.get_job(job_id)
    assert job is not None and job.queue == q.name
    assert job_id in _drain(q)


workers = st.one_of(
    st.text(max_size=300),
    st.sampled_from([*HOSTILE, " ", "\t\n", "\u3000", "w\x00"]),
    st.integers() | st.none() | st.binary(max_size=3),
)


@FUZZ
@given(wid=workers)
def test_q2_fuzzed_worker_id_is_refused_without_sql_or_stored_verbatim(
    qs: Any, spy: SqlSpy, wid: object
) -> None:
    q = qs.queue(f"wid_{next(_uniq)}")
    job_id = q.enqueue(b"w")
    if not worker_ok(wid):
        with spy.no_sql(), pytest.raises(InvalidNameError):
            q.claim_batch(wid, 1)
        with spy.no_sql(), pytest.raises(InvalidNameError):
            q.claim_one(wid)
        return
    [handle] = q.claim_batch(wid, 1)
    assert handle.id == job_id
    job = q.get_job(job_id)
    assert job is not None and job.worker_id == wid
    assert handle.ack() is True


seconds_like = st.one_of(
    st.integers(min_value=-5, max_value=2 * 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e-5),  # sub-microsecond: rounds to nothing
    st.timedeltas(),
    st.sampled_from([True, False, "30", b"1", [1]]),
)
ints_like = st.one_of(
    st.integers(min_value=-(2**33), max_value=2**33),
    st.sampled_from([True, 1.0, "5", None]),
)


@FUZZ
@given(
    kw=st.fixed_dictionaries(
        {},
        optional={
            "priority": ints_like,
            "max_attempts": ints_like,
            "visibility_timeout": seconds_like,
            "expires_in": seconds_like | st.none(),
            "retry_base": seconds_like,
            "retry_cap": seconds_like,
            "dead_letter_retention": seconds_like | st.none(),
        },
    )
)
@example(kw={"visibility_timeout": 1e-7})
@example(kw={"visibility_timeout": 1e-300})
@example(kw={"visibility_timeout": timedelta(microseconds=1)})
def test_q3_fuzzed_queue_opts_raise_documented_errors_or_work_in_the_database(
    qs: Any, spy: SqlSpy, kw: dict[str, Any]
) -> None:
    before = spy.count
    try:
        opts = QueueOpts(**kw)
        queue = qs.queue(f"qopts_{next(_uniq)}", opts)
    except BaseException as exc:
        assert _documented(exc), repr(exc)
        assert spy.count == before
        return
    q = queue
    job_id = q.enqueue(b"o")
    job = q.get_job(job_id)
    assert job is not None
    assert job.max_attempts == opts.max_attempts
    assert job.priority == opts.priority
    assert job.visibility_timeout > 0
    assert job.visibility_timeout == pytest.approx(opts.visibility_timeout, abs=1e-6)
    if opts.expires_in is None:
        assert job.expires_at is None
    else:  # one clock read per enqueue (Q4): expiry is exactly created_at + expires_in
        assert job.expires_at == job.created_at + timedelta(seconds=opts.expires_in)
    swept = q.sweep_expired()
    after = q.get_job(job_id)
    if swept.purged:
        # A retention shorter than the time between the sweep's two statements
        # (zero, or a few microseconds) purges the row it just dead-lettered (Q25).
        retention = opts.dead_letter_retention
        assert swept.expired == 1 and after is None
        assert retention is not None and retention < 1.0, retention
        return
    assert after is not None
    assert (after.status, after.last_error) == (
        ("dead", "expired") if swept.expired else ("pending", None)
    )


_zones = st.sampled_from(
    [None, UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12, minutes=-30))]
)
run_ats = st.one_of(
    st.datetimes(timezones=_zones),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(1, 1, 3), timezones=_zones),
    st.datetimes(min_value=datetime(9999, 12, 30), timezones=_zones),
    st.sampled_from(["2020-01-01", 0, None]),
)


@FUZZ
@given(
    kw=st.fixed_dictionaries(
        {},
        optional={
            "priority": ints_like,
            "delay": seconds_like | st.none(),
            "run_at": run_ats,
            "expires_in": seconds_like | st.none(),
            "max_attempts": ints_like,
        },
    )
)
@example(kw={"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))})
@example(kw={"run_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12)))})
def test_q3_fuzzed_enqueue_opts_raise_documented_errors_or_are_stored_and_claimable(
    qs: Any, spy: SqlSpy, kw: dict[str, Any]
) -> None:
    before = spy.count
    try:
        opts = EnqueueOpts(**kw)
    except BaseException as exc:
        assert _documented(exc), repr(exc)
        assert spy.count == before
        return
    q = qs.queue(f"eopts_{next(_uniq)}")
    job_id = q.enqueue(b"e", opts)
    job = q.get_job(job_id)
    assert job is not None
    if opts.max_attempts is not None:
        assert job.max_attempts == opts.max_attempts
    if opts.priority is not None:
        assert job.priority == opts.priority
    if opts.run_at is not None and opts.delay is None:
        assert job.run_at == opts.run_at
    # Whatever it was stamped with, a claim of its queue never chokes on it.
    claimed = _drain(q)
    assert claimed in ([], [job_id])


payload_lists = st.lists(
    st.one_of(
        st.binary(max_size=600),
        st.sampled_from([b"", b"\x00", b"\x00" * 9, b"\xff\xfe", "é".encode(), b"'; --"]),
        st.binary(max_size=20).map(bytearray),
        st.binary(max_size=20).map(memoryview),
    ),
    max_size=12,
)


@FUZZ
@given(payloads=payload_lists)
def test_q5_fuzzed_payload_batches_round_trip_and_none_is_lost(
    qs: Any, payloads: list[Any]
) -> None:
    q = qs.queue(f"pl_{next(_uniq)}")
    ids = q.enqueue_many(payloads)
    assert len(ids) == len(payloads) == len(set(ids))
    for job_id, sent in zip(ids, payloads, strict=True):
        job = q.get_job(job_id)
        assert job is not None and job.payload == bytes(sent)
    assert sorted(_drain(q)) == sorted(ids)


@settings(FUZZ, max_examples=5)
@given(size=st.integers(min_value=1 << 20, max_value=6 << 20), seed=st.integers(0, 2**32))
@example(size=6 << 20, seed=0)
def test_q5_multi_megabyte_payload_round_trips_exactly(qs: Any, size: int, seed: int) -> None:
    data = random.Random(seed).randbytes(size)
    q = qs.queue(f"big_{next(_uniq)}")
    job_id = q.enqueue(data)
    job = q.get_job(job_id)
    assert job is not None and job.payload == data
    [handle] = q.claim_batch("big", 1)
    assert handle.payload == data
    assert handle.ack() is True


@FUZZ
@given(
    payload=st.one_of(
        st.text(max_size=5),
        st.integers(),
        st.none(),
        st.lists(st.binary(max_size=2), max_size=2),
        st.floats(),
    )
)
def test_q3_fuzzed_non_bytes_payload_is_a_type_error_without_sql(
    qs: Any, spy: SqlSpy, payload: object
) -> None:
    q = qs.queue("nonbytes")
    with spy.no_sql(), pytest.raises(TypeError):
        q.enqueue(payload)
    with spy.no_sql(), pytest.raises(TypeError):
        q.enqueue_many([b"ok", payload])


errors = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.sampled_from(list("'\"\\;-%$:\x00é🙂\n\t ")), max_size=60),
    st.integers() | st.binary(max_size=4),
)


@FUZZ
@given(error=errors, how=st.sampled_from(["fail", "retry"]))
@example(error='it\'s "quoted" \\ and \u0000 NUL', how="fail")
@example(error='it\'s "quoted" \\ and \u0000 NUL', how="retry")
@example(error="'; DROP TABLE alkstore.jobs; --", how="fail")
def test_q19_fuzzed_error_text_is_stored_verbatim_or_refused_before_sql(
    qs: Any, spy: SqlSpy, error: object, how: str
) -> None:
    q = qs.queue(f"err_{next(_uniq)}", QueueOpts(max_attempts=3))
    job_id = q.enqueue(b"e")
    [handle] = q.claim_batch("erring", 1)
    op = handle.fail if how == "fail" else handle.retry
    if error is not None and not isinstance(error, str):
        with spy.no_sql(), pytest.raises(TypeError):
            op(error)
    elif isinstance(error, str) and "\x00" in error:
        with spy.no_sql(), pytest.raises(ValueError, match="NUL"):
            op(error)
    else:
        assert op(error) is True
        job = q.get_job(job_id)
        assert job is not None
        default = "failed" if how == "fail" else None
        assert job.last_error == (default if error is None else error)
        return
    # A call refused before any SQL consumes nothing (Q20): the handle still acks.
    assert handle.ack() is True


@FUZZ
@given(
    value=st.one_of(seconds_like, st.none()),
    how=st.sampled_from(["retry_delay", "heartbeat"]),
)
def test_q17_fuzzed_retry_delay_and_heartbeat_extend_are_checked_before_sql(
    qs: Any, spy: SqlSpy, value: object, how: str
) -> None:
    q = qs.queue(f"dur_{next(_uniq)}")
    job_id = q.enqueue(b"d")
    [handle] = q.claim_batch("dur", 1)
    before = spy.count
    try:
        result = handle.retry(None, value) if how == "retry_delay" else handle.heartbeat(value)
    except BaseException as exc:
        assert _documented(exc), repr(exc)
        assert spy.count == before  # refused before any SQL
        assert handle.ack() is True  # ... and the refusal consumed nothing (Q20)
        return
    assert result is True
    job = q.get_job(job_id)
    assert job is not None
    if how == "retry_delay":
        assert job.status == "pending" and job.attempts == 1
    else:
        assert job.status == "processing" and job.claim_deadline is not None
        assert q.cancel(job_id) is True


job_ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([True, 1.5, "1", None, b"1"]),
)


@FUZZ
@given(job_id=job_ids)
def test_q22_fuzzed_job_ids_are_refused_before_sql_or_harmless(
    qs: Any, spy: SqlSpy, job_id: object
) -> None:
    q = qs.queue("ids")
    is_int = isinstance(job_id, int) and not isinstance(job_id, bool)
    for call in (q.get_job, q.cancel, lambda j: q.ack_batch([j])):
        if is_int and -(2**63) <= job_id < 2**63:  # type: ignore[operator]
            assert call(job_id) in (None, False, 0)
        elif is_int:
            with spy.no_sql(), pytest.raises(ValueError):
                call(job_id)
        else:
            with spy.no_sql(), pytest.raises(TypeError):
                call(job_id)


@FUZZ
@given(n=st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.sampled_from([1.0, "2"])))
def test_q13_fuzzed_claim_sizes_refuse_or_return_without_losing_jobs(
    qs: Any, spy: SqlSpy, n: object
) -> None:
    q = qs.queue(f"n_{next(_uniq)}")
    ids = q.enqueue_many([b"1", b"2", b"3"])
    acked: list[int] = []
    if not isinstance(n, int):
        with spy.no_sql(), pytest.raises(TypeError):
            q.claim_batch("n", n)
    elif n > 2**31 - 1:
        with spy.no_sql(), pytest.raises(ValueError):
            q.claim_batch("n", n)
    elif n <= 0:
        with spy.no_sql():
            assert q.claim_batch("n", n) == []
    else:
        acked = [h.id for h in q.claim_batch("n", n)]
        assert acked == ids[: min(n, 3)]
        assert q.ack_batch(acked) == len(acked)
    assert sorted(acked + _drain(q)) == sorted(ids)  # none lost, none twice
