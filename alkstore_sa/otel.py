"""OpenTelemetry for alkstore_sa (B3; extra ``otel``: ``pip install 'alkstore-sa[otel]'``).

``instrument()`` once at start-up, before workers start (a worker run reads
the instrumentation when it begins), and every enqueue and handler run of
the process is traced and measured:

- a ``send {queue}`` PRODUCER span per enqueue call, whose context is
  injected with the global propagator into a carrier stored with the jobs
  (``Job.trace_context``);
- a ``process {queue}`` CONSUMER span per handler run, its parent the
  context extracted from that carrier (the enqueue and the run are one
  trace) and a link to it, current while the handler runs (the handler's
  own spans nest under it);
- metrics after the messaging semantic conventions, plus
  ``alkstore.job.outcomes`` and ``alkstore.job.queue_time``.

Only ``opentelemetry-api`` is imported.  Without an SDK configured (and no
providers given) every span and instrument is the API's no-op, and nothing
is stored with the jobs.  docs/observability.md lists every span, attribute
and metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextvars import Token
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from sqlalchemy import Connection

from ._extras import instrument as _instrument
from ._extras.instrument import Carrier, Outcome, Send, queue_time
from ._values.job import Job

__all__ = ["instrument", "instrumented", "uninstrument"]

log = logging.getLogger("alkstore_sa.instrument")

# Semantic-convention names, as strings: the semantic-conventions package is
# not a dependency of the extra.
SYSTEM = "alkstore"
_SYSTEM = "messaging.system"
_DESTINATION = "messaging.destination.name"
_OPERATION_TYPE = "messaging.operation.type"
_OPERATION_NAME = "messaging.operation.name"
_MESSAGE_ID = "messaging.message.id"
_BATCH_COUNT = "messaging.batch.message_count"
_ERROR_TYPE = "error.type"
_ATTEMPT = "alkstore.job.attempt"
_OUTCOME = "alkstore.outcome"

# Bucket boundaries (seconds) advised to the SDK: the semantic conventions'
# for durations, and the same stretched to an hour for time spent waiting.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_QUEUE_TIME_BUCKETS = (*_DURATION_BUCKETS, 30, 60, 300, 900, 3600)


# The global tracer providers behind which every span is the API's no-op.
_NO_SDK = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _failed(span: trace.Span, exc: BaseException) -> None:
    """Mark ``span`` as ended by ``exc``: the exception event, ``error.type``, ERROR status."""
    if span.is_recording():
        span.record_exception(exc)
        span.set_attribute(_ERROR_TYPE, _error_type(exc))
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class _QueueAttrs:
    """One queue's attribute sets, built once (instruments keep no reference to mutate)."""

    __slots__ = ("base", "outcomes", "process", "send")

    def __init__(self, queue: str) -> None:
        self.base = {_SYSTEM: SYSTEM, _DESTINATION: queue}
        self.send = {**self.base, _OPERATION_NAME: "send"}
        self.process = {**self.base, _OPERATION_NAME: "process"}
        self.outcomes: dict[str, dict[str, str]] = {
            outcome: {**self.base, _OUTCOME: outcome}
            for outcome in ("acked", "retried", "dead", "lost", "snoozed", "cancelled")
        }


class _ProcessScope:
    """The ``process {queue}`` span around one handler run, entered in its thread or task."""

    __slots__ = ("_job", "_observer", "_span", "_token")

    def __init__(self, observer: _OtelObserver, job: Job) -> None:
        self._observer = observer
        self._job = job
        self._span: trace.Span | None = None
        self._token: Token[Context] | None = None

    def __enter__(self) -> _ProcessScope:
        try:
            self._start()
        except Exception:  # never the handler's problem: it runs untraced
            log.warning("could not start the process span of job %d", self._job.id, exc_info=True)
        return self

    def _start(self) -> None:
        job = self._job
        carrier = job.trace_context
        parent = propagate.extract(carrier) if isinstance(carrier, dict) and carrier else None
        links: list[Link] = []
        if parent is not None:
            enqueued = trace.get_current_span(parent).get_span_context()
            if enqueued.is_valid:
                links.append(Link(enqueued))
        span = self._observer.tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                _SYSTEM: SYSTEM,
                _DESTINATION: job.queue,
                _OPERATION_TYPE: "process",
                _OPERATION_NAME: "process",
                _MESSAGE_ID: str(job.id),
                _ATTEMPT: job.attempts,
            },
            links=links,
            record_exception=False,  # done here, once (also for BaseException)
            set_status_on_exception=False,
        )
        self._span = span
        # Current while the handler runs: its own spans nest under this one.
        self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, token = self._span, self._token
        if span is None or token is None:
            return
        self._span = self._token = None
        try:
            if exc is not None:
                _failed(span, exc)
        finally:
            otel_context.detach(token)
            span.end()


class _OtelObserver(_instrument.Observer):
    """The B3 observer: spans from ``tracer``, metrics from ``meter``."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
    ) -> None:
        from . import __version__

        self._given_tracer_provider = tracer_provider
        self.tracer = trace.get_tracer("alkstore_sa", __version__, tracer_provider)
        meter = metrics.get_meter("alkstore_sa", __version__, meter_provider)
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Jobs enqueued (one per job, however many an enqueue call carried).",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Handler runs that ended (one per run: a retried job counts each run).",
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="How long a handler ran (runs that never returned are not recorded).",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.outcomes = meter.create_counter(
            "alkstore.job.outcomes",
            unit="{job}",
            description=(
                "What became of each handler run: acked, retried, dead, lost, snoozed or cancelled."
            ),
        )
        self.queue_time = meter.create_histogram(
            "alkstore.job.queue_time",
            unit="s",
            description="From a job's run_at to its claim by a worker.",
            explicit_bucket_boundaries_advisory=_QUEUE_TIME_BUCKETS,
        )
        self._attrs: dict[str, _QueueAttrs] = {}

    def attrs(self, queue: str) -> _QueueAttrs:
        found = self._attrs.get(queue)
        if found is None:
            found = self._attrs.setdefault(queue, _QueueAttrs(queue))
        return found

    # -- the hooks ---------------------------------------------------------

    def recording(self) -> bool:
        """Whether spans can be recorded: an SDK (or any real provider) is behind the tracer.

        Otherwise every span is the API's no-op, which only passes on the
        context it was started in: where that context holds no span either,
        the hooks skip the span work (the result is the same, for less).
        The global provider is looked up each time: it may be set after
        ``instrument()``.
        """
        if self._given_tracer_provider is not None:
            return not isinstance(self._given_tracer_provider, trace.NoOpTracerProvider)
        return not isinstance(trace.get_tracer_provider(), _NO_SDK)

    def wrap_enqueue(self, queue: str, count: int, send: Send) -> Send:
        # Here, in the caller's thread and context: its current span is the parent.
        parent = otel_context.get_current()
        sent = self.sent
        attrs = self.attrs(queue)
        if not self.recording() and not trace.get_current_span(parent).get_span_context().is_valid:
            # The no-op span would be invalid and inject nothing: count, and send as is.
            def counted(conn: Connection, carrier: Carrier) -> list[int]:
                try:
                    ids = send(conn, carrier)
                except BaseException as exc:
                    sent.add(count, {**attrs.send, _ERROR_TYPE: _error_type(exc)})
                    raise
                sent.add(len(ids), attrs.send)
                return ids

            return counted
        tracer = self.tracer
        span_attrs: dict[str, Any] = {
            _SYSTEM: SYSTEM,
            _DESTINATION: queue,
            _OPERATION_TYPE: "send",
            _OPERATION_NAME: "send",
        }
        if count != 1:
            span_attrs[_BATCH_COUNT] = count

        def traced(conn: Connection, carrier: Carrier) -> list[int]:
            span = tracer.start_span(
                f"send {queue}",
                context=parent,
                kind=SpanKind.PRODUCER,
                attributes=span_attrs,
                record_exception=False,
                set_status_on_exception=False,
            )
            ctx = trace.set_span_in_context(span, parent)
            # Current while the INSERT runs (a database instrumentation's span nests here).
            token = otel_context.attach(ctx)
            try:
                propagate.inject(carrier, context=ctx)
                ids = send(conn, carrier)
                if count == 1 and span.is_recording():
                    span.set_attribute(_MESSAGE_ID, str(ids[0]))
            except BaseException as exc:
                _failed(span, exc)
                sent.add(count, {**attrs.send, _ERROR_TYPE: _error_type(exc)})
                raise
            finally:
                otel_context.detach(token)
                span.end()
            sent.add(len(ids), attrs.send)
            return ids

        return traced

    def claimed(self, queue: str, jobs: Sequence[Job]) -> None:
        record = self.queue_time.record
        attrs = self.attrs(queue).base
        for job in jobs:
            waited = queue_time(job)
            if waited is not None:
                record(waited, attrs)

    def handler_scope(self, job: Job) -> _ProcessScope | None:
        if not job.trace_context and not self.recording():
            return None  # the no-op span of an empty context: nothing to record or pass on
        return _ProcessScope(self, job)

    def finished(self, queue: str, job: Job, outcome: Outcome, duration: float | None) -> None:
        attrs = self.attrs(queue)
        self.consumed.add(1, attrs.process)
        self.outcomes.add(1, attrs.outcomes[outcome])
        if duration is not None:
            self.process_duration.record(duration, attrs.process)


_lock = threading.Lock()
_observer: _OtelObserver | None = None


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Trace and measure every enqueue and handler run of this process (B3).

    ``tracer_provider`` / ``meter_provider``: where spans and metrics go;
    None for the global ones (``opentelemetry.trace.set_tracer_provider``,
    also when set later).  Idempotent: while instrumented, another call
    changes nothing (``uninstrument()`` first to change providers).  Call it
    before starting workers: a worker run keeps the instrumentation that
    was in place when it started.
    """
    global _observer
    with _lock:
        if _observer is not None:
            return
        _observer = _OtelObserver(tracer_provider, meter_provider)
        _instrument.install(_observer)


def uninstrument() -> None:
    """Stop tracing and measuring new enqueues and worker runs (running ones keep it)."""
    global _observer
    with _lock:
        if _observer is not None:
            _instrument.uninstall(_observer)
            _observer = None


def instrumented() -> bool:
    """Whether ``instrument()`` is in force."""
    return _observer is not None
