"""Hypothesis properties of the pure rules: option resolution (Q4), the retry
curve (Q17), and validation (Q2, Q3) raising only the documented exceptions.

No database: these are the functions the operations are built from, checked
over far more inputs than a database round trip per example would allow.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from alkstore_sa import EnqueueOpts, InvalidNameError, QueueOpts
from alkstore_sa._values import validate as v
from alkstore_sa._values.stamps import backoff_bounds, backoff_delay, resolve_stamps

PROPS = settings(max_examples=300, deadline=None)

# -- strategies -----------------------------------------------------------------

seconds = st.one_of(
    st.integers(min_value=1, max_value=10**6),
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=30)),
)
priorities = st.integers(min_value=-(2**31), max_value=2**31 - 1)
attempts = st.integers(min_value=1, max_value=10**6)
zones = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)),
    st.integers(min_value=-14 * 60 + 1, max_value=14 * 60 - 1),
)
aware = st.builds(
    lambda d, tz: d.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)),
    zones,
)


def _secs(value: float | int | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


queue_opts = st.builds(
    QueueOpts,
    priority=priorities,
    max_attempts=st.integers(min_value=1, max_value=1000),
    visibility_timeout=seconds,
    expires_in=st.none() | seconds,
    retry_base=seconds,
    retry_cap=st.floats(min_value=1e-3, max_value=3600) | st.integers(1, 3600),
    dead_letter_retention=st.none() | seconds,
)
enqueue_opts = st.none() | st.builds(
    EnqueueOpts,
    priority=st.none() | priorities,
    delay=st.none() | st.just(0) | seconds,
    run_at=st.none() | aware,
    expires_in=st.none() | seconds,
    max_attempts=st.none() | st.integers(min_value=1, max_value=1000),
)

# -- Q4: resolve_stamps ----------------------------------------------------------


@PROPS
@given(queue=queue_opts, job=enqueue_opts)
def test_q4_property_job_options_resolve_over_the_queue_stamps(
    queue: QueueOpts, job: EnqueueOpts | None
) -> None:
    s = resolve_stamps(queue, job)
    j = job or EnqueueOpts()
    assert s.priority == (queue.priority if j.priority is None else j.priority)
    assert s.max_attempts == (queue.max_attempts if j.max_attempts is None else j.max_attempts)
    assert s.visibility_timeout == timedelta(seconds=_secs(queue.visibility_timeout))
    # delay wins over run_at; with neither, the job is due at the clock read.
    if j.delay is not None:
        assert s.run_at is None
        assert s.delay == timedelta(seconds=_secs(j.delay))
    else:
        assert s.run_at == j.run_at
        assert s.delay == timedelta(0)
    expires = j.expires_in if j.expires_in is not None else queue.expires_in
    assert s.expires_in == (None if expires is None else timedelta(seconds=_secs(expires)))
    # Relative times stay intervals, to be added to the one clock read in SQL.
    assert s.delay >= timedelta(0)
    assert s.expires_in is None or s.expires_in > timedelta(0)
    assert s.visibility_timeout > timedelta(0)


@PROPS
@given(queue=queue_opts)
def test_q4_property_no_job_options_means_the_queue_stamps(queue: QueueOpts) -> None:
    assert resolve_stamps(queue, None) == resolve_stamps(queue, EnqueueOpts())


# -- Q17: backoff_bounds ------------------------------------------------------------


@PROPS
@given(opts=queue_opts, k=attempts)
@example(opts=QueueOpts(retry_base=1, retry_cap=3600), k=10**6)
@example(opts=QueueOpts(retry_base=1000), k=3)
def test_q17_property_bounds_follow_the_formula(opts: QueueOpts, k: int) -> None:
    low, high = backoff_bounds(opts, k)
    base, cap = _secs(opts.retry_base), _secs(opts.retry_cap)
    # d = min(cap, base * 2**(k-1)).  Past k-1 = 64 the product would overflow a
    # float, but base >= 1 microsecond makes it > 1.8e13 > any cap: d is the cap.
    d = cap if k - 1 > 64 else min(cap, base * 2.0 ** (k - 1))
    assert (low, high) == (math.floor(d / 2), math.floor(d))
    assert isinstance(low, int) and isinstance(high, int)
    assert 0 <= low <= high <= 3600


@PROPS
@given(opts=queue_opts, k=st.integers(min_value=1, max_value=200))
def test_q17_property_bounds_never_shrink_as_attempts_grow(opts: QueueOpts, k: int) -> None:
    low, high = backoff_bounds(opts, k)
    low2, high2 = backoff_bounds(opts, k + 1)
    assert low <= low2 and high <= high2


@PROPS
@given(opts=queue_opts, k=attempts)
def test_q17_property_a_draw_is_an_integer_in_the_bounds(opts: QueueOpts, k: int) -> None:
    low, high = backoff_bounds(opts, k)
    for _ in range(5):
        delay = backoff_delay(opts, k)
        assert isinstance(delay, int) and low <= delay <= high


@PROPS
@given(base=st.integers(min_value=1, max_value=3600), k=attempts)
def test_q17_property_the_cap_of_3600_always_wins(base: int, k: int) -> None:
    _, high = backoff_bounds(QueueOpts(retry_base=base, retry_cap=3600), k)
    assert high <= 3600
    if base * 2 ** min(k - 1, 20) >= 3600:
        assert backoff_bounds(QueueOpts(retry_base=base), k) == (1800, 3600)


# -- Q2/Q3: validation raises only what is documented ---------------------------------


def _name_ok(name: str) -> bool:
    """Q2 as worded, independently of the package (a name is judged in its NFC form)."""
    name = unicodedata.normalize("NFC", name)
    return (
        0 < len(name.encode("utf-8")) <= 63
        and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in name)
        # "Any case" read as Unicode caseless matching: "alk\\u017ftore" is reserved too.
        and not name.casefold().startswith(("alkstore", "pg_"))
    )


names = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=10, max_size=70),
    st.builds(
        str.__add__,
        st.sampled_from(["alkstore", "ALKSTORE", "aLkStOrE", "pg_", "PG_", "Pg_", "pg", "alk"]),
        st.text(max_size=8),
    ),
)


@PROPS
@given(name=names)
@example(name="é" * 31 + "a")
@example(name="é" * 32)
@example(name="a\u200b")
@example(name="PG_x")
@example(name="alk\u017ftore")  # long s: casefolds to "alkstore"
@example(name="\u212aelvin")  # Kelvin sign: not reserved either way
def test_q2_property_queue_name_accepted_exactly_when_the_rule_says(name: str) -> None:
    if _name_ok(name):
        # Q2: a queue name is its NFC form (the same queue however it was typed).
        assert v.queue_name(name) == unicodedata.normalize("NFC", name)
    else:
        with pytest.raises(InvalidNameError):
            v.queue_name(name)


anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),
    st.timedeltas(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.datetimes(),
    st.lists(st.integers(), max_size=2),
)


@PROPS
@given(value=anything, allow_zero=st.booleans())
@example(value=10**400, allow_zero=False)
@example(value=-(10**400), allow_zero=True)
@example(value=timedelta.max, allow_zero=False)
@example(value=1e-9, allow_zero=False)
@example(value=float("nan"), allow_zero=True)
def test_q3_property_durations_raise_only_documented_errors(
    value: object, allow_zero: bool
) -> None:
    try:
        result = v.duration(value, "d", allow_zero=allow_zero)
    except (TypeError, ValueError):
        return
    assert isinstance(result, float) and math.isfinite(result)
    assert 0 <= result <= v.MAX_SECONDS and (allow_zero or result > 0)
    # A duration that must be positive stays so as a timedelta (and an interval);
    # where zero is allowed (a delay), a sliver below a microsecond may round to it.
    assert timedelta(seconds=result) > timedelta(0) or allow_zero


option_values = st.one_of(anything, seconds, priorities, aware)


@PROPS
@given(
    field=st.sampled_from(
        [
            "priority",
            "max_attempts",
            "visibility_timeout",
            "expires_in",
            "retry_base",
            "retry_cap",
            "dead_letter_retention",
        ]
    ),
    value=option_values,
)
def test_q3_property_queue_opts_raise_only_documented_errors(field: str, value: Any) -> None:
    try:
        opts = QueueOpts(**{field: value})
    except (TypeError, ValueError):
        return
    # Accepted: stored normalised, and usable to resolve and to back off.
    resolve_stamps(opts, None)
    backoff_bounds(opts, 1)


@PROPS
@given(
    field=st.sampled_from(["priority", "delay", "run_at", "expires_in", "max_attempts"]),
    value=option_values,
)
def test_q3_property_enqueue_opts_raise_only_documented_errors(field: str, value: Any) -> None:
    try:
        opts = EnqueueOpts(**{field: value})
    except (TypeError, ValueError):
        return
    if opts.run_at is not None:
        assert opts.run_at.utcoffset() is not None  # never naive
    resolve_stamps(QueueOpts(), opts)


@PROPS
@given(value=anything)
@example(value="w")
@example(value=" \t")
def test_q2_property_worker_id_raises_only_invalid_name(value: object) -> None:
    try:
        assert v.worker_id(value) == value
    except InvalidNameError:
        assert not (isinstance(value, str) and value.strip() and "\x00" not in value)


def test_q3_an_aware_run_at_outside_the_utc_calendar_is_refused() -> None:
    # Its UTC instant is in year 10000: PostgreSQL would store it, but it could
    # not come back as a Python datetime, so it is refused up front.
    with pytest.raises(ValueError):
        EnqueueOpts(run_at=datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-14))))
    with pytest.raises(ValueError):
        EnqueueOpts(run_at=datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=14))))
    EnqueueOpts(run_at=datetime(9999, 12, 29, tzinfo=UTC))  # inside the margin
