"""B3's cost: the alkstore cases with and without OpenTelemetry, interleaved in one run.

``--otel none,api,sdk --rounds N`` runs every alkstore step of the selected
cases under each mode back to back, the modes in a rotated order each round
(none, api, sdk / api, sdk, none / ...), so a slow spell of a shared machine
falls on every mode alike.  The modes:

- ``none``: ``instrument()`` never called (the figures of a plain run);
- ``api``: ``alkstore_sa.otel.instrument()`` with no SDK configured: the
  API's no-op tracer and meter (what a library user pays by default);
- ``sdk``: ``instrument()`` with an SDK ``TracerProvider`` (a
  ``BatchSpanProcessor`` over an exporter that drops every batch) and an SDK
  ``MeterProvider`` (a periodic reader, every 5 s, over an exporter that
  drops): every span and data point is made, none leaves the process.

Baselines (raw SQL, pgqueuer) run once per round, under ``none``.  The
summary gives each alkstore figure's rate, and its client CPU time per job
where the case measures it (E1, D2), as a ratio to the ``none`` figure of
the same case, shape and round, and the median of those ratios.  The
global OpenTelemetry providers are never set, so ``api`` stays the API's
no-op whatever ran before it.  D1's drainers (spawned processes) read the
mode from ``ALKSTORE_BENCH_OTEL`` and instrument themselves alike.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._report import Figure, Figures

MODES = ("none", "api", "sdk")
ENV_VAR = "ALKSTORE_BENCH_OTEL"
_TAG = "+otel-"
_CPU = "cpu_us_per_job"  # the client CPU per job figure of E1 and D2


def parse(value: str) -> list[str]:
    modes = [m.strip().lower() for m in value.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown or not modes:
        raise ValueError(f"--otel takes a comma-separated list of {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


def enable(mode: str) -> Callable[[], None]:
    """Instrument this process as ``mode`` says; returns what undoes it."""
    if mode == "none":
        return lambda: None
    from alkstore_sa import otel

    if mode == "api":
        otel.instrument()
        return otel.uninstrument
    if mode != "sdk":
        raise ValueError(f"unknown otel mode {mode!r}")
    tracer_provider, meter_provider = _sdk_providers()
    otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)

    def undo() -> None:
        otel.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return undo


def _sdk_providers() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class DropSpans(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class DropMetrics(MetricExporter):
        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            return None

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    reader = PeriodicExportingMetricReader(DropMetrics(), export_interval_millis=5_000)
    return tracer_provider, MeterProvider(metric_readers=[reader])


@contextmanager
def mode(name: str) -> Iterator[None]:
    """``name``'s instrumentation in force here and in the processes started inside."""
    undo = enable(name)
    os.environ[ENV_VAR] = name
    try:
        yield
    finally:
        os.environ.pop(ENV_VAR, None)
        undo()


def enable_from_env() -> Callable[[], None]:
    """In a spawned drainer: the mode its parent ran under."""
    return enable(os.environ.get(ENV_VAR, "none"))


Step = Callable[[str], Figure | list[Figure]]


def interleave(
    steps: list[tuple[str, Step]], modes: list[str], rounds: int
) -> list[tuple[str, Step]]:
    """Each step under every mode back to back, the modes' order rotated each round.

    Back to back, so a mode and its baseline are seconds apart, not minutes:
    on a shared machine the load changes within a round.  Baselines (raw SQL,
    pgqueuer) run under ``none`` only: nothing of ours to instrument.
    """
    out: list[tuple[str, Step]] = []
    for r in range(rounds):
        k = r % len(modes)
        order = modes[k:] + modes[:k]
        for label, step in steps:
            for m in order:
                if m != "none" and "alkstore" not in label:
                    continue
                out.append((f"{label} (otel {m}, round {r + 1})", _tagged(step, m, r + 1)))
    return out


def _tagged(step: Step, m: str, round_no: int) -> Step:
    def run(label: str) -> Figure | list[Figure]:
        with mode(m):
            made = step(label)
        for fig in made if isinstance(made, list) else [made]:
            if m != "none":
                fig.system += f"{_TAG}{m}"
            fig.extra["round"] = round_no
        return made

    return run


def summary(figs: Figures) -> tuple[str, list[dict[str, Any]]]:
    """Each instrumented figure over its ``none`` twin of the same round.

    Two ratios: the rate (wall clock, ``> 1`` is faster) and, where the case
    measures it, this process's CPU time per job (``> 1`` costs more).
    """
    plain: dict[tuple[str, str, str, float], Figure] = {}
    for f in figs.items:
        if _TAG not in f.system and "round" in f.extra:
            plain[(f.case, f.system, f.shape, f.extra["round"])] = f
    rates: dict[tuple[str, str, str, str], list[float]] = {}
    cpus: dict[tuple[str, str, str, str], list[float]] = {}
    for f in figs.items:
        if _TAG not in f.system:
            continue
        base, m = f.system.split(_TAG, 1)
        twin = plain.get((f.case, base, f.shape, f.extra.get("round", 0)))
        if twin is None or twin.rate <= 0:
            continue
        key = (f.case, base, f.shape, m)
        rates.setdefault(key, []).append(f.rate / twin.rate)
        cpu, twin_cpu = f.extra.get(_CPU), twin.extra.get(_CPU)
        if cpu is not None and twin_cpu:
            cpus.setdefault(key, []).append(cpu / twin_cpu)
    lines = [
        "",
        "B3 OpenTelemetry cost, against the uninstrumented run of the same step and round",
        "rate = jobs/s ratio (> 1 faster); cpu = client CPU per job ratio (> 1 costlier)",
        "-" * 100,
        f"{'case':<5} {'system':<15} {'shape':<31} {'otel':<4} {'rate':>6} {'cpu':>6}  "
        "per round (rate; cpu)",
    ]
    rows: list[dict[str, Any]] = []
    for key, rs in sorted(rates.items()):
        case, base, shape, m = key
        cs = cpus.get(key, [])
        rate_med = statistics.median(rs)
        cpu_med = statistics.median(cs) if cs else None
        each = " ".join(f"{r:.2f}" for r in rs)
        if cs:
            each += "; " + " ".join(f"{c:.3f}" for c in cs)
        cpu_txt = "-" if cpu_med is None else f"{cpu_med:.3f}"
        lines.append(
            f"{case:<5} {base:<15} {shape[:31]:<31} {m:<4} {rate_med:>6.3f} {cpu_txt:>6}  {each}"
        )
        rows.append(
            {
                "case": case,
                "system": base,
                "shape": shape,
                "otel": m,
                "rate_ratio_median": rate_med,
                "rate_ratios": rs,
                "cpu_ratio_median": cpu_med,
                "cpu_ratios": cs,
            }
        )
    return "\n".join(lines), rows
