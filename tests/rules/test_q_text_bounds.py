"""Issue 24: bounded, encodable text at every public entry point, refused before any SQL.

Error text is cut to ``MAX_ERROR_CHARS`` (8,000) by the handle's ``retry``
and ``fail`` (both faces), by ``RetryJob``/``FailJob`` and by the Worker;
lone surrogates in a queue name, a worker id or an error are refused as
``InvalidNameError``/``ValueError`` with no SQL sent; a worker id is at most
200 characters; queue names are NFC (Q2, docs/semantics.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alkstore_sa import FailJob, InvalidNameError, RetryJob
from alkstore_sa._values.validate import MAX_ERROR_CHARS, MAX_WORKER_ID_CHARS
from alkstore_sa.worker._bounded import bounded
from alkstore_sa.worker._handlers import stored_error

from .._sqlspy import SqlSpy, sync_engine_of

TEN_MB = "e" * 10_000_000


@pytest.fixture
def spy(qs: Any) -> Iterator[SqlSpy]:
    s = SqlSpy(sync_engine_of(qs))
    yield s
    s.close()


def test_q18_q19_ten_megabyte_errors_are_cut_to_8000_characters(qs: Any) -> None:
    q = qs.queue("cut")
    q.enqueue_many([b"r", b"f"])
    first, second = q.claim_batch("w", 2)
    assert first.retry(TEN_MB) is True
    assert second.fail(TEN_MB) is True
    for job_id in (first.id, second.id):
        job = q.get_job(job_id)
        assert job is not None and job.last_error == "e" * MAX_ERROR_CHARS
        assert job.errors[-1].error == "e" * MAX_ERROR_CHARS
    assert MAX_ERROR_CHARS == 8000


def test_b1_retryjob_failjob_and_the_worker_cut_error_text() -> None:
    assert RetryJob(TEN_MB).error == "e" * MAX_ERROR_CHARS
    assert FailJob(TEN_MB).error == "e" * MAX_ERROR_CHARS
    assert str(FailJob(TEN_MB)) == "e" * MAX_ERROR_CHARS
    assert FailJob(None).error is None and RetryJob().error is None
    assert stored_error(TEN_MB) == "e" * MAX_ERROR_CHARS
    # A handler's text with a lone surrogate or a NUL is still stored, escaped.
    assert stored_error("bad \ud800 \x00end") == "bad \\ud800 end"
    try:
        raise ValueError("x" * 20_000)
    except ValueError as exc:
        text = bounded(exc).text
    # The worker's traceback keeps its frames and cuts the message (V4).
    assert len(text) <= MAX_ERROR_CHARS and "ValueError: xxx" in text and "cut]" in text


def test_q2_lone_surrogates_are_refused_before_sql(qs: Any, spy: SqlSpy) -> None:
    with spy.no_sql(), pytest.raises(InvalidNameError, match="surrogate"):
        qs.queue("q\ud800")
    q = qs.queue("sur")
    q.enqueue(b"x")
    with spy.no_sql():
        for call in (lambda: q.claim_one("w\udfff"), lambda: q.claim_batch("w\ud800", 5)):
            with pytest.raises(InvalidNameError, match="surrogate"):
                call()
    handle = q.claim_one("w")
    assert handle is not None
    with spy.no_sql():
        with pytest.raises(ValueError, match="surrogate"):
            handle.fail("boom \ud800")
        with pytest.raises(ValueError, match="surrogate"):
            handle.retry("boom \udc80")
    assert handle.ack() is True


def test_q2_worker_id_is_at_most_200_characters(qs: Any, spy: SqlSpy) -> None:
    q = qs.queue("wid")
    q.enqueue(b"x")
    with spy.no_sql(), pytest.raises(InvalidNameError, match="200"):
        q.claim_one("w" * (MAX_WORKER_ID_CHARS + 1))
    with spy.no_sql(), pytest.raises(InvalidNameError):
        q.claim_batch("w" * 1_000_000, 1)
    handle = q.claim_one("w" * MAX_WORKER_ID_CHARS)
    assert handle is not None and handle.job.worker_id == "w" * MAX_WORKER_ID_CHARS


def test_q2_queue_names_are_nfc_so_lookalikes_are_one_queue(qs: Any) -> None:
    nfd, nfc = "cafe\u0301", "caf\u00e9"
    assert qs.queue(nfd).name == nfc
    job_id = qs.queue(nfd).enqueue(b"x")
    handle = qs.queue(nfc).claim_one("w")
    assert handle is not None and handle.id == job_id and handle.job.queue == nfc
    assert qs.queue(nfd).channel == qs.queue(nfc).channel
