"""``Job`` as the claim builds it: the same value ``Job(...)`` makes, and as frozen.

The claim assembles each ``Job`` on an unfrozen twin of its slots and then
makes it a ``Job``, instead of calling the frozen dataclass's ``__init__``
(``_values/job.py``, for speed); these pin that nothing a caller sees differs.
"""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta

import pytest

from alkstore_sa import Job
from alkstore_sa._values.job import LIVE_COLUMNS

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ROW = (7, "q", b"x", "processing", 3, NOW, 1, 5, timedelta(seconds=30), None, "w", NOW, NOW,
       "boom", None, {"traceparent": "t"}, "k", timedelta(seconds=60), "g", 9)  # fmt: skip


def test_a_claimed_job_equals_the_job_its_fields_make() -> None:
    assert len(ROW) == len(LIVE_COLUMNS)
    built = Job.from_live(ROW)
    assert type(built) is Job
    expected = Job(
        7, "q", b"x", "processing", 3, NOW, 1, 5, 30.0, None, "w", NOW, NOW, "boom", None,
        (), {"traceparent": "t"}, "k", None, None, 60.0, "g", 9, (),
    )  # fmt: skip
    assert built == expected
    assert repr(built) == repr(expected)
    assert {f.name: getattr(built, f.name) for f in dataclasses.fields(Job)} == {
        f.name: getattr(expected, f.name) for f in dataclasses.fields(Job)
    }


def test_a_claimed_job_is_frozen() -> None:
    job = Job.from_live(ROW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempts = 2  # type: ignore[misc]
    assert dataclasses.replace(job, attempts=2).attempts == 2


def test_a_claimed_job_pickles_and_copies_as_a_job() -> None:
    job = Job.from_live(ROW)
    again = pickle.loads(pickle.dumps(job))
    assert type(again) is Job
    assert again == job
    assert dataclasses.replace(job) == job
