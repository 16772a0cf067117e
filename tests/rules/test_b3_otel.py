"""B3: OpenTelemetry spans and metrics (``alkstore_sa.otel``), against the real database.

Spans go to the SDK's in-memory exporter and metrics to an
``InMemoryMetricReader``, both through providers handed to ``instrument()``
(the global providers are never set here, so "no SDK" stays true for the
tests that need it).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    Tracer,
)
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from alkstore_sa import (
    AsyncStore,
    AsyncWorker,
    FailJob,
    Job,
    QueueOpts,
    RetryJob,
    Store,
    Worker,
    otel,
)
from alkstore_sa._db.sql import enqueue as enqueue_sql
from alkstore_sa._db.sql._render import rendered
from alkstore_sa._extras.instrument import installed

from .._sqlspy import SqlSpy
from .._workers import KINDS, handler, start_worker, wait_for

ROOT_SPAN = "web request"


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer: Tracer

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.finished(name)
        assert len(found) == 1, [s.name for s in self.finished()]
        return found[0]

    def points(self, name: str) -> list[Any]:
        """Every data point of the metric ``name`` (empty when never recorded)."""
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out.extend(metric.data.data_points)
        return out

    def unit(self, name: str) -> str | None:
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        assert sm.scope.name == "alkstore_sa"
                        return metric.unit
        return None


@pytest.fixture
def tel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Otel(spans, reader, tracer_provider.get_tracer("tests"))
    finally:
        otel.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _stored_context(store: Store, job_id: int) -> Any:
    with store.engine.connect() as conn:
        return conn.execute(
            text("SELECT trace_context FROM alkstore.jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()


def _traceparent_span_id(carrier: dict[str, str]) -> int:
    # W3C: version-traceid-spanid-flags
    return int(carrier["traceparent"].split("-")[2], 16)


def _drain(kind: str, database_url: URL, queue: str, fn: Any, done: Any, **kw: Any) -> None:
    """Run a worker of ``kind`` with ``fn`` on ``queue`` until ``done()``, then stop it."""
    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue(queue, kw.get("opts")): fn}, poll_interval=0.05)
    )
    try:
        wait_for(done)
    finally:
        running.stop()


# -- (a) one trace from the enqueue to the handler run ----------------------


@pytest.mark.parametrize("kind", KINDS)
def test_b3_process_span_joins_the_enqueuing_trace(
    kind: str, database_url: URL, store: Store, tel: Otel
) -> None:
    q = store.queue("mail")
    with tel.tracer.start_as_current_span(ROOT_SPAN) as request:
        job_id = q.enqueue(b"hello")
    carrier = _stored_context(store, job_id)
    ran: list[Job] = []
    _drain(
        kind, database_url, "mail", handler(kind, ran.append), lambda: ran and not q.get_job(job_id)
    )

    send = tel.one("send mail")
    process = tel.one("process mail")
    root = request.get_span_context()
    # The send span: a PRODUCER child of the caller's span, its context stored with the job.
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == root.span_id
    assert send.context.trace_id == root.trace_id
    assert _traceparent_span_id(carrier) == send.context.span_id
    assert ran[0].trace_context == carrier
    assert dict(send.attributes or {}) == {
        "messaging.system": "alkstore",
        "messaging.destination.name": "mail",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.message.id": str(job_id),
    }
    # The process span: a CONSUMER in the same trace, child of send, and linked to it.
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == root.trace_id
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.links[0].context.trace_id == root.trace_id
    assert dict(process.attributes or {}) == {
        "messaging.system": "alkstore",
        "messaging.destination.name": "mail",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": str(job_id),
        "alkstore.job.attempt": 1,
    }
    assert process.status.status_code is StatusCode.UNSET


def test_b3_enqueue_many_is_one_send_span_sharing_one_carrier(store: Store, tel: Otel) -> None:
    q = store.queue("batch")
    with tel.tracer.start_as_current_span(ROOT_SPAN):
        ids = q.enqueue_many([b"a", b"b", b"c"])
    send = tel.one("send batch")
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send.attributes
    carriers = [_stored_context(store, i) for i in ids]
    assert carriers[0] == carriers[1] == carriers[2]
    assert _traceparent_span_id(carriers[0]) == send.context.span_id
    assert q.enqueue_many([]) == []  # nothing sent: no span for it
    assert len(tel.finished("send batch")) == 1


async def test_b3_async_enqueue_takes_the_callers_span(
    async_engine: AsyncEngine, tel: Otel
) -> None:
    """The async face runs the INSERT in a greenlet; the parent is still the caller's span."""
    astore = AsyncStore(async_engine)
    q = astore.queue("amail")
    with tel.tracer.start_as_current_span(ROOT_SPAN) as request:
        job_id = await q.enqueue(b"x")
        ids = await q.enqueue_many([b"y", b"z"])
    for send in tel.finished("send amail"):
        assert send.parent is not None
        assert send.parent.span_id == request.get_span_context().span_id
    job = await q.get_job(job_id)
    assert job is not None and job.trace_context is not None
    assert _traceparent_span_id(job.trace_context) in {
        s.context.span_id for s in tel.finished("send amail")
    }
    assert len(tel.finished("send amail")) == 2 and len(ids) == 2
    await astore.close()


def test_b3_failed_enqueue_ends_its_span_with_the_error(store: Store, tel: Otel) -> None:
    q = store.queue("gone")
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE alkstore.jobs RENAME TO jobs_away"))
    try:
        with pytest.raises(Exception):  # noqa: B017 - whichever error the missing table makes
            q.enqueue(b"x")
    finally:
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE alkstore.jobs_away RENAME TO jobs"))
    send = tel.one("send gone")
    assert send.status.status_code is StatusCode.ERROR
    assert [e.name for e in send.events] == ["exception"]
    (point,) = tel.points("messaging.client.sent.messages")
    assert point.value == 1 and "error.type" in point.attributes


# -- (b) the handler's own spans nest under the process span ------------------


@pytest.mark.parametrize("kind", [*KINDS, "async-worker-sync-handler"])
def test_b3_handler_spans_nest_under_the_process_span(
    kind: str, database_url: URL, store: Store, tel: Otel
) -> None:
    q = store.queue("nest")
    job_id = q.enqueue(b"")  # outside any span: the send span is a root span
    done: list[int] = []

    def body(job: Job) -> None:
        with tel.tracer.start_as_current_span("handler work"):
            done.append(job.id)

    async def abody(job: Job) -> None:
        await asyncio.sleep(0)  # the scope holds across an await in the task
        with tel.tracer.start_as_current_span("handler work"):
            await asyncio.sleep(0)
            done.append(job.id)

    worker_kind = "sync" if kind == "sync" else "async"
    fn = abody if kind == "async" else body
    _drain(worker_kind, database_url, "nest", fn, lambda: done and not q.get_job(job_id))

    process = tel.one("process nest")
    work = tel.one("handler work")
    assert work.parent is not None and work.parent.span_id == process.context.span_id
    assert work.context.trace_id == process.context.trace_id
    send = tel.one("send nest")
    assert send.parent is None
    assert process.parent is not None and process.parent.span_id == send.context.span_id


@pytest.mark.parametrize(
    "stored", ['{"traceparent": "not a traceparent"}', '["a", "list"]', "{}"], ids=repr
)
def test_b3_a_carrier_that_is_not_one_starts_a_fresh_trace(
    stored: str, database_url: URL, store: Store, tel: Otel
) -> None:
    """Whatever another producer wrote there, the handler runs (traced, with no parent)."""
    q = store.queue("odd")
    with store.engine.begin() as conn:
        job_id = q.enqueue(b"", session=conn)
        conn.execute(
            text("UPDATE alkstore.jobs SET trace_context = CAST(:tc AS jsonb) WHERE id = :id"),
            {"tc": stored, "id": job_id},
        )
    ran: list[Job] = []
    _drain("sync", database_url, "odd", ran.append, lambda: ran and not q.get_job(job_id))
    process = tel.one("process odd")
    assert process.parent is None and process.links == ()


# -- (c) metrics and outcomes ---------------------------------------------------


def _outcome_handler(job: Job) -> None:
    if job.payload == b"retry":
        raise RetryJob("later", delay=120)
    if job.payload == b"fail":
        raise FailJob("no such account")


@pytest.mark.parametrize("kind", KINDS)
def test_b3_metrics_for_ack_retry_and_dead_letter(
    kind: str, database_url: URL, store: Store, tel: Otel
) -> None:
    q = store.queue("metered")
    ok = q.enqueue(b"ok")
    retry, fail = q.enqueue_many([b"retry", b"fail"])

    def settled() -> bool:
        return (
            q.get_job(ok) is None
            and (r := q.get_job(retry)) is not None
            and r.attempts == 1
            and r.status == "pending"
            and (f := q.get_job(fail)) is not None
            and f.status == "dead"
        )

    _drain(kind, database_url, "metered", handler(kind, _outcome_handler), settled)
    wait_for(lambda: sum(p.value for p in tel.points("alkstore.job.outcomes")) == 3)

    base = {"messaging.system": "alkstore", "messaging.destination.name": "metered"}
    (sent,) = tel.points("messaging.client.sent.messages")
    assert sent.value == 3 and dict(sent.attributes) == {**base, "messaging.operation.name": "send"}
    (consumed,) = tel.points("messaging.client.consumed.messages")
    assert consumed.value == 3
    assert dict(consumed.attributes) == {**base, "messaging.operation.name": "process"}
    outcomes = {
        p.attributes["alkstore.outcome"]: p.value for p in tel.points("alkstore.job.outcomes")
    }
    assert outcomes == {"acked": 1, "retried": 1, "dead": 1}
    for p in tel.points("alkstore.job.outcomes"):
        assert dict(p.attributes) == {**base, "alkstore.outcome": p.attributes["alkstore.outcome"]}
    (duration,) = tel.points("messaging.process.duration")
    assert duration.count == 3 and 0 <= duration.min <= duration.max < 10
    assert dict(duration.attributes) == {**base, "messaging.operation.name": "process"}
    (queue_time,) = tel.points("alkstore.job.queue_time")
    assert queue_time.count == 3 and queue_time.min >= 0 and queue_time.max < 30
    assert dict(queue_time.attributes) == base
    units = {
        name: tel.unit(name)
        for name in (
            "messaging.client.sent.messages",
            "messaging.client.consumed.messages",
            "messaging.process.duration",
            "alkstore.job.outcomes",
            "alkstore.job.queue_time",
        )
    }
    assert units == {
        "messaging.client.sent.messages": "{message}",
        "messaging.client.consumed.messages": "{message}",
        "messaging.process.duration": "s",
        "alkstore.job.outcomes": "{job}",
        "alkstore.job.queue_time": "s",
    }

    # RetryJob and FailJob end their process span in error too (the run did not succeed).
    by_id = {s.attributes["messaging.message.id"]: s for s in tel.finished("process metered")}
    assert by_id[str(ok)].status.status_code is StatusCode.UNSET
    for job_id, error in ((retry, "RetryJob"), (fail, "FailJob")):
        span = by_id[str(job_id)]
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["error.type"] == f"alkstore_sa._values.errors.{error}"
        (event,) = span.events
        assert event.name == "exception" and event.attributes is not None
        assert event.attributes["exception.type"].endswith(error)


def test_b3_queue_time_counts_from_run_at(database_url: URL, store: Store, tel: Otel) -> None:
    q = store.queue("waited")
    with store.engine.begin() as conn:
        job_id = q.enqueue(b"", session=conn)
        # Due two seconds ago: the claim comes at least that long after run_at.
        conn.execute(
            text("UPDATE alkstore.jobs SET run_at = run_at - interval '2 seconds' WHERE id = :id"),
            {"id": job_id},
        )
    ran: list[Job] = []
    _drain("sync", database_url, "waited", ran.append, lambda: ran and not q.get_job(job_id))
    (point,) = tel.points("alkstore.job.queue_time")
    assert point.count == 1 and 2.0 <= point.min < 30


# -- (d) not instrumented: nothing stored, the same statements -------------------


def _enqueue_texts(store: Store) -> tuple[str, str]:
    dialect = store.engine.dialect
    one = rendered(enqueue_sql.enqueue_one(), dialect, "alkstore")
    many = rendered(enqueue_sql.enqueue(), dialect, "alkstore")
    assert one is not None and many is not None
    return one.sql, many.sql


@pytest.mark.parametrize("mode", ["never", "api-only"])
def test_b3_untraced_enqueue_stores_null_and_sends_the_same_statements(
    mode: str, store: Store
) -> None:
    """Not instrumented, or instrumented with no SDK (the API's no-ops): no carrier."""
    if mode == "api-only":
        otel.instrument()  # the global providers: never set in these tests, so no-ops
    try:
        assert bool(installed()) is (mode == "api-only")
        spy = SqlSpy(store.engine)
        try:
            q = store.queue("plain")
            one = q.enqueue(b"x")
            with Session(store.engine) as session:
                many = q.enqueue_many([b"y", b"z"], session=session)
                session.commit()
        finally:
            spy.close()
        assert [s for s, _ in spy.statements] == list(_enqueue_texts(store))
        assert all("trace_context" not in s for s, _ in spy.statements)
        for job_id in (one, *many):
            assert _stored_context(store, job_id) is None
            job = q.get_job(job_id)
            assert job is not None and job.trace_context is None
    finally:
        otel.uninstrument()


@pytest.mark.parametrize("kind", KINDS)
def test_b3_without_an_sdk_a_current_context_is_passed_on(
    kind: str, database_url: URL, store: Store
) -> None:
    """No SDK, but a context already current (say, extracted from a request by an
    API-only instrumentation): as the API's no-op spans do, it is passed on, from the
    enqueue through the job to the handler."""
    incoming = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    otel.instrument()  # the global providers: never set in these tests, so no-ops
    try:
        q = store.queue("passed")
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(incoming)))
        try:
            job_id = q.enqueue(b"")
        finally:
            otel_context.detach(token)
        carrier = _stored_context(store, job_id)
        assert carrier["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        seen: list[SpanContext] = []

        def body(job: Job) -> None:
            seen.append(trace.get_current_span().get_span_context())

        _drain(kind, database_url, "passed", handler(kind, body), lambda: seen)
        assert (seen[0].trace_id, seen[0].span_id) == (incoming.trace_id, incoming.span_id)
    finally:
        otel.uninstrument()


def test_b3_traced_enqueue_binds_the_carrier(store: Store, tel: Otel) -> None:
    spy = SqlSpy(store.engine)
    try:
        q = store.queue("traced")
        with tel.tracer.start_as_current_span(ROOT_SPAN):
            one = q.enqueue(b"x")
            q.enqueue_many([b"y", b"z"])
    finally:
        spy.close()
    (s1, p1), (s2, p2) = spy.statements
    assert s1 != s2 and "trace_context" in s1 and "trace_context" in s2
    carrier = _stored_context(store, one)
    assert carrier["traceparent"] not in s1  # bound, never pasted into the text
    bound = p1["p_trace_context"]
    assert getattr(bound, "obj", bound) == carrier  # psycopg's Jsonb wrapper, or the dict
    assert "p_trace_context" in p2 and "p_payloads" in p2


# -- (e) transactional enqueue ----------------------------------------------------


def test_b3_enqueue_in_a_session_is_traced_and_committed_with_it(store: Store, tel: Otel) -> None:
    q = store.queue("tx")
    with tel.tracer.start_as_current_span(ROOT_SPAN) as request, Session(store.engine) as session:
        job_id = q.enqueue(b"x", session=session)
        session.commit()
        rolled = q.enqueue(b"y", session=session)
        session.rollback()
    sends = tel.finished("send tx")
    assert len(sends) == 2
    for send in sends:
        assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    carrier = _stored_context(store, job_id)
    assert _traceparent_span_id(carrier) == sends[0].context.span_id
    assert q.get_job(rolled) is None  # rolled back with the session; its span stays (it ran)


async def test_b3_enqueue_in_an_async_session(async_engine: AsyncEngine, tel: Otel) -> None:
    astore = AsyncStore(async_engine)
    q = astore.queue("atx")
    with tel.tracer.start_as_current_span(ROOT_SPAN) as request:
        async with AsyncSession(async_engine) as session:
            job_id = await q.enqueue(b"x", session=session)
            await session.commit()
    send = tel.one("send atx")
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    job = await q.get_job(job_id)
    assert job is not None and job.trace_context is not None
    assert _traceparent_span_id(job.trace_context) == send.context.span_id
    await astore.close()


def test_b3_a_requeued_dead_job_keeps_its_carrier(store: Store, tel: Otel) -> None:
    q = store.queue("again")
    with tel.tracer.start_as_current_span(ROOT_SPAN):
        job_id = q.enqueue(b"")
    carrier = _stored_context(store, job_id)
    (claimed,) = q.claim_batch("w", 1)
    assert claimed.job.trace_context == carrier
    assert claimed.fail("broken")
    assert q.requeue_dead([job_id]) == 1
    job = q.get_job(job_id)
    assert job is not None and job.status == "pending" and job.trace_context == carrier


# -- instrument() itself ---------------------------------------------------------


def test_b3_instrument_is_idempotent_and_uninstrument_removes_it() -> None:
    assert not otel.instrumented()
    otel.instrument()
    otel.instrument()
    try:
        assert len(installed()) == 1 and otel.instrumented()
    finally:
        otel.uninstrument()
    assert installed() == () and not otel.instrumented()
    otel.uninstrument()  # again: nothing to do


# -- the core never imports opentelemetry ------------------------------------------

_BLOCK = """
import sys
from importlib.abc import MetaPathFinder

class Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {blocked!r} or name.startswith({blocked!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
        return None

sys.meta_path.insert(0, Block())
"""

_RUN_A_WORKER = """
import threading
from sqlalchemy import create_engine
from alkstore_sa import Store, Worker

engine = create_engine({url!r})
store = Store(engine)
q = store.queue("isolated")
job_id = q.enqueue(b"x")
done = threading.Event()
worker = Worker({{q: lambda job: done.set()}}, poll_interval=0.05, handle_signals=False)
thread = threading.Thread(target=worker.run)
thread.start()
assert done.wait(20)
worker.stop()
thread.join(20)
assert q.get_job(job_id) is None
"""


def _python(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-3000:]


def test_b3_core_and_worker_run_without_opentelemetry(database_url: URL) -> None:
    url = database_url.render_as_string(hide_password=False)
    code = (
        _BLOCK.format(blocked="opentelemetry")
        + _RUN_A_WORKER.format(url=url)
        + textwrap.dedent("""
            import alkstore_sa, alkstore_sa.worker
            assert not [m for m in sys.modules if m.startswith("opentelemetry")]
            try:
                import alkstore_sa.otel
            except ModuleNotFoundError as exc:
                assert "opentelemetry" in str(exc)
            else:
                raise AssertionError("alkstore_sa.otel imported without opentelemetry")
            """)
    )
    _python(code)


def test_b3_without_an_sdk_instrument_is_harmless(database_url: URL) -> None:
    """API installed, SDK absent: instrument() works, traces nothing, stores nothing."""
    url = database_url.render_as_string(hide_password=False)
    code = (
        _BLOCK.format(blocked="opentelemetry.sdk")
        + "import alkstore_sa.otel\nalkstore_sa.otel.instrument()\n"
        + _RUN_A_WORKER.format(url=url)
        + textwrap.dedent("""
            from sqlalchemy import text
            with engine.connect() as conn:
                n = conn.execute(text(
                    "SELECT count(*) FROM alkstore.jobs WHERE trace_context IS NOT NULL"
                )).scalar_one()
            assert n == 0
            assert not [m for m in sys.modules if m.startswith("opentelemetry.sdk")]
            """)
    )
    _python(code)


def test_b3_the_docs_setup_traces_through_the_global_providers(database_url: URL) -> None:
    """docs/observability.md's "Enabling it" block, run as written (in a subprocess: it
    sets the global providers), then an enqueue outside any span: a root send span,
    recorded, so its context is stored."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    section = doc[doc.index("### Enabling it") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/observability.md: no python block under 'Enabling it'"
    url = database_url.render_as_string(hide_password=False)
    code = match.group(1) + textwrap.dedent(f"""
        from sqlalchemy import create_engine
        from alkstore_sa import Store
        assert otel.instrumented()
        q = Store(create_engine({url!r})).queue("docs")
        job = q.get_job(q.enqueue(b"x"))
        assert job.trace_context and job.trace_context["traceparent"].startswith("00-")
        provider.shutdown()
        """)
    _python(code)


def test_b3_queue_opts_untouched_by_instrumentation(store: Store, tel: Otel) -> None:
    """A traced enqueue stamps the job exactly as an untraced one would."""
    q = store.queue("stamped", QueueOpts(max_attempts=7, priority=3))
    with tel.tracer.start_as_current_span(ROOT_SPAN):
        job_id = q.enqueue(b"x")
    job = q.get_job(job_id)
    assert job is not None and (job.max_attempts, job.priority) == (7, 3)
