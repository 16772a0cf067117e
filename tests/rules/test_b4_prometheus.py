"""B4: Prometheus metrics -- queue gauges from store.stats() (cached), worker counters and
histograms, the ASGI app, `alkstore metrics --port` and `alkstore worker --metrics-port`.

Every figure is checked against a real database; scrapes go over HTTP to real subprocesses,
or through a plain ASGI call of `metrics_app` (no HTTP client library needed)."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import (
    AsyncStore,
    AsyncWorker,
    EnqueueOpts,
    FailJob,
    Job,
    QueueStats,
    RetryJob,
    Store,
    Worker,
)
from alkstore_sa import prometheus as prom
from alkstore_sa._extras import instrument as _instrument

from .._sqlspy import SqlSpy
from .._workers import KINDS, handler, start_worker, wait_for
from ..cli.test_cli import ROOT, _env, one_line_error
from ..cli.test_o8_cli import _every_state, _usage_error

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


def _samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _assert_gauges_match(samples: Samples, stats: dict[str, QueueStats]) -> None:
    assert _get(samples, "alkstore_up") == 1.0
    served = {labels for (name, labels) in samples if name == "alkstore_queue_paused"}
    assert served == {(("queue", q),) for q in stats}
    for q, s in stats.items():
        for state in ("due", "scheduled", "processing", "dead"):
            assert _get(samples, "alkstore_queue_jobs", queue=q, state=state) == getattr(s, state)
        assert _get(samples, "alkstore_queue_lapsed_jobs", queue=q) == s.lapsed
        assert _get(samples, "alkstore_queue_expired_jobs", queue=q) == s.expired
        assert _get(samples, "alkstore_queue_paused", queue=q) == (1.0 if s.paused else 0.0)
        age = _get(samples, "alkstore_queue_oldest_due_age_seconds", queue=q)
        assert age is not None
        if s.due:  # read a moment apart: the served age is the same or a little older
            assert s.oldest_due_age - 0.5 <= age <= s.oldest_due_age + 5
        else:
            assert age == 0.0


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return _samples(resp.read().decode())


# --- the ASGI app, called as an ASGI server would ----------------------------------------


async def _asgi_get(app: Any, path: str = "/") -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"accept", b"text/plain")],
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, body


def test_b4_metrics_app_serves_queue_gauges_matching_stats(store: Store) -> None:
    _every_state(store)
    store.queue("zzz").pause()
    app = prom.metrics_app(store, registry=None)
    status, headers, body = asyncio.run(_asgi_get(app, "/metrics"))
    stats = store.stats()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert set(stats) == {"mixed", "other", "zzz"}
    assert stats["mixed"].due == 2 and stats["mixed"].scheduled == 1 and stats["mixed"].dead == 1
    _assert_gauges_match(_samples(body.decode()), stats)


def test_b4_metrics_app_serves_a_registry_and_an_async_store(database_url: URL) -> None:
    with Store.from_url(database_url) as sync:
        _every_state(sync)
        expected = sync.stats()
    registry = CollectorRegistry()
    metrics = prom.instrument(registry)
    try:

        async def scrape() -> bytes:
            engine = create_async_engine(database_url)
            try:
                astore = AsyncStore(engine)
                status, _, body = await _asgi_get(prom.metrics_app(astore, registry))
                assert status == 200
                return body
            finally:
                await engine.dispose()

        metrics.claimed("mixed", [])  # a queue seen: its counters exist at 0
        samples = _samples(asyncio.run(scrape()).decode())
    finally:
        prom.uninstrument(registry)
    _assert_gauges_match(samples, expected)
    assert _get(samples, "alkstore_worker_claimed_total", queue="mixed") == 0.0
    assert _get(samples, "alkstore_worker_jobs_total", queue="mixed", outcome="acked") == 0.0


def test_b4_metrics_app_answers_the_lifespan_protocol_when_served_alone() -> None:
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(prom.metrics_app()({"type": "lifespan"}, receive, send))
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def test_b4_metrics_app_never_registers_into_the_registry(store: Store) -> None:
    # Two apps over one registry and one store: no duplicate-timeseries clash, and the
    # registry itself stays free of the store's gauges.
    registry = CollectorRegistry()
    for _ in range(2):
        status, _, _ = asyncio.run(_asgi_get(prom.metrics_app(store, registry)))
        assert status == 200
    assert "alkstore_up" not in {m.name for m in registry.collect()}


# --- the cache and failures ----------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_b4_store_collector_runs_one_query_per_cache_window(store: Store) -> None:
    store.queue("cached").enqueue(b"x")
    clock = _Clock()
    collector = prom.StoreCollector(store, cache_seconds=30, clock=clock)
    registry = CollectorRegistry()
    spy = SqlSpy(store.engine)
    try:
        registry.register(collector)  # describe() only: no query
        assert spy.count == 0

        def due() -> float | None:
            return registry.get_sample_value(
                "alkstore_queue_jobs", {"queue": "cached", "state": "due"}
            )

        assert due() == 1.0
        # One statement for every queue, and one for the registry of workers (V1).
        assert spy.count == 2
        store.queue("cached").enqueue(b"y")
        sent = spy.count
        clock.now += 29.9
        assert due() == 1.0  # the cached figure: no query
        assert spy.count == sent
        clock.now += 0.2
        assert due() == 2.0
        assert spy.count == sent + 2
    finally:
        spy.close()


def test_b4_store_collector_failure_is_up_0_and_never_raises(
    engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    with Store(engine, schema="never_migrated") as missing:
        collector = prom.StoreCollector(missing, cache_seconds=10, clock=clock)
        registry = CollectorRegistry()
        registry.register(collector)
        spy = SqlSpy(engine)
        try:
            with caplog.at_level(logging.WARNING, logger="alkstore_sa.prometheus"):
                samples = _samples(_exposition(registry))
            tried = spy.count
            assert tried >= 1
            samples_again = _samples(_exposition(registry))  # the failure is cached too
            assert spy.count == tried
        finally:
            spy.close()
    assert _get(samples, "alkstore_up") == 0.0
    assert not [k for k in samples if k[0].startswith("alkstore_queue_")]
    assert samples_again == samples
    assert "stats query failed" in caplog.text


def _exposition(registry: CollectorRegistry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def test_b4_store_collector_refuses_what_it_cannot_read(database_url: URL, store: Store) -> None:
    astore = AsyncStore(create_async_engine(database_url))
    with pytest.raises(TypeError, match="metrics_app"):
        prom.StoreCollector(astore)  # type: ignore[arg-type]
    for bad in (-1, float("nan"), float("inf"), 86401):
        with pytest.raises(ValueError, match="cache_seconds"):
            prom.StoreCollector(store, cache_seconds=bad)
    with pytest.raises(TypeError, match="cache_seconds"):
        prom.StoreCollector(store, cache_seconds="5")  # type: ignore[arg-type]


# --- worker metrics -----------------------------------------------------------------------


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    reg = CollectorRegistry()
    yield reg
    prom.uninstrument(reg)


def test_b4_instrument_is_idempotent_and_uninstrument_undoes_it(
    registry: CollectorRegistry,
) -> None:
    first = prom.instrument(registry)
    assert prom.instrument(registry) is first
    assert _instrument.installed().count(first) == 1
    assert registry.get_sample_value("alkstore_worker_claimed_total", {"queue": "q"}) is None
    prom.uninstrument(registry)
    assert first not in _instrument.installed()
    assert list(registry.collect()) == []
    again = prom.instrument(registry)  # registers afresh: no duplicate-timeseries error
    assert again is not first and again in _instrument.installed()


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_b4_worker_counts_outcomes_durations_and_queue_time(
    kind: str, database_url: URL, store: Store, registry: CollectorRegistry
) -> None:
    prom.instrument(registry)
    q = store.queue("b4")
    q.enqueue_many([b"ok", b"ok", b"ok", b"retry", b"die"])
    q.enqueue(b"boom", EnqueueOpts(max_attempts=1))
    time.sleep(0.3)  # every first claim waits at least this long

    def work(job: Job) -> None:
        time.sleep(0.02)
        if job.payload == b"retry" and job.attempts == 1:
            raise RetryJob("again", delay=0)
        if job.payload == b"die":
            raise FailJob("no")
        if job.payload == b"boom":
            raise ValueError("boom")

    cls = Worker if kind == "sync" else AsyncWorker
    running = start_worker(
        kind, database_url, lambda s: cls({s.queue("b4"): handler(kind, work)}, poll_interval=0.1)
    )
    outcomes = ("acked", "retried", "dead", "lost")
    try:
        wait_for(
            lambda: sum(_value(registry, "alkstore_worker_jobs_total", queue="b4", outcome=o)
                        for o in outcomes) == 7
        )  # fmt: skip
    finally:
        running.stop()
    counts = {
        o: _value(registry, "alkstore_worker_jobs_total", queue="b4", outcome=o) for o in outcomes
    }
    assert counts == {"acked": 4, "retried": 1, "dead": 2, "lost": 0}
    assert _value(registry, "alkstore_worker_claimed_total", queue="b4") == 7
    duration = "alkstore_worker_job_duration_seconds"
    assert _value(registry, f"{duration}_count", queue="b4") == 7
    assert _value(registry, f"{duration}_sum", queue="b4") >= 7 * 0.02
    waited = "alkstore_worker_job_queue_time_seconds"
    assert _value(registry, f"{waited}_count", queue="b4") == 7
    # Six first attempts waited >= 0.3 s; only the retry's second attempt may be quicker.
    assert _value(registry, f"{waited}_bucket", queue="b4", le="0.25") <= 1
    assert _value(registry, f"{waited}_sum", queue="b4") >= 6 * 0.3
    assert q.stats().dead == 2


# --- the core does not import the extra ---------------------------------------------------


def test_b4_core_never_imports_prometheus_client() -> None:
    code = (
        "import sys, alkstore_sa, alkstore_sa.worker, alkstore_sa.cli._worker;"
        "import alkstore_sa._extras.health;"
        "assert 'prometheus_client' not in sys.modules, 'imported';"
        "print('clean')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "clean", proc.stderr


# --- `alkstore metrics` and `alkstore worker --metrics-port` ------------------------------


def _popen(url: URL, *args: str, cwd: Path = ROOT, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", *args],
        env=_env(url, **env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def served_url(proc: subprocess.Popen[str], what: str) -> str:
    """The URL the command printed for ``what`` ("serving WHAT at URL")."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith(f"serving {what} at "):
            return line.split(" at ", 1)[1].strip()
    _, err = proc.communicate(timeout=10)
    raise AssertionError(f"no URL for {what}; exit {proc.returncode}: {err}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"did not stop on {sig}:\n{err}") from None
    return proc.returncode, err


def test_b4_cli_metrics_serves_the_gauges_cached(database_url: URL, store_on: Store) -> None:
    _every_state(store_on)
    proc = _popen(database_url, "metrics", "--port", "0", "--cache-seconds", "1")
    try:
        url = served_url(proc, "alkstore queue metrics")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        first = _scrape(url)
        _assert_gauges_match(first, store_on.stats())
        store_on.queue("mixed").enqueue(b"one more")
        second = _scrape(url)  # within the second: the same query's figures
        assert _get(second, "alkstore_queue_jobs", queue="mixed", state="due") == 2
        time.sleep(1.1)
        third = _scrape(url)
        assert _get(third, "alkstore_queue_jobs", queue="mixed", state="due") == 3
    finally:
        code, err = stop(proc, signal.SIGINT)  # Ctrl-C ends it as cleanly as SIGTERM
    assert code == 0, err
    assert "Traceback" not in err


_APP = """
import os
from alkstore_sa import FailJob, Store, Worker

store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])

def work(job):
    if job.payload == b"die":
        raise FailJob("no")

worker = Worker({store.queue("jobs"): work}, poll_interval=0.1)
"""


def test_b4_cli_worker_metrics_port_serves_its_counters_and_the_gauges(
    database_url: URL, store_on: Store, tmp_path: Path
) -> None:
    (tmp_path / "b4app.py").write_text(textwrap.dedent(_APP))
    q = store_on.queue("jobs")
    q.enqueue_many([b"a", b"b", b"die"])
    store_on.queue("idle").enqueue(b"x", EnqueueOpts(delay=3600))
    proc = _popen(database_url, "worker", "b4app:worker", "--metrics-port", "0", cwd=tmp_path)
    try:
        url = served_url(proc, "worker metrics")

        def counted() -> Samples | None:
            samples = _scrape(url)
            acked = _get(samples, "alkstore_worker_jobs_total", queue="jobs", outcome="acked")
            dead = _get(samples, "alkstore_worker_jobs_total", queue="jobs", outcome="dead")
            # All three outcomes counted (a scrape between two of them saw 2 acked, 0 dead).
            return samples if (acked, dead) == (2, 1) else None

        samples = wait_for(counted, timeout=15, every=0.1)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert _get(samples, "alkstore_worker_jobs_total", queue="jobs", outcome="dead") == 1
    assert _get(samples, "alkstore_worker_claimed_total", queue="jobs") == 3
    assert _get(samples, "alkstore_worker_job_duration_seconds_count", queue="jobs") == 3
    assert _get(samples, "alkstore_queue_jobs", queue="idle", state="scheduled") == 1
    assert _get(samples, "alkstore_up") == 1.0
    assert _get(samples, "process_cpu_seconds_total") is not None  # the default registry's


def _fake_missing_extra(tmp_path: Path) -> str:
    """A directory whose `prometheus_client` fails to import, as if the extra were absent."""
    pkg = tmp_path / "noprom" / "prometheus_client"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('not installed (test)')\n")
    return str(pkg.parent)


@pytest.mark.parametrize(
    "args",
    [["metrics", "--port", "0"], ["worker", "examples.tasks:worker", "--metrics-port", "0"]],
)
def test_b4_cli_without_the_extra_says_what_to_install(
    database_url: URL, tmp_path: Path, args: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", *args],
        env=_env(database_url, PYTHONPATH=_fake_missing_extra(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = one_line_error(proc, 2)
    assert "install alkstore-sa[prometheus]" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["metrics", "--port", "http"], "a port is a whole number"),
        (["metrics", "--port", "65536"], "a port is 0..65535"),
        (["metrics", "--port", "-1"], "a port is 0..65535"),
        (["metrics"], "the following arguments are required: --port"),
        (["metrics", "--port", "0", "--cache-seconds", "-1"], "must be 0..86400"),
        (["worker", "examples.tasks:worker", "--metrics-port", "x"], "a port is a whole number"),
        (
            ["worker", "examples.tasks:worker", "--metrics-port", "9100", "--health-port", "9100"],
            "--metrics-port and --health-port must differ",
        ),
        (["worker", "examples.tasks:worker", "--no-queue-gauges"], "goes with --metrics-port"),
    ],
)
def test_b4_cli_bad_ports_are_usage_errors(database_url: URL, args: list[str], says: str) -> None:
    from ..cli.test_cli import alkstore

    assert says in _usage_error(alkstore(*args, url=database_url))


def test_b4_cli_metrics_on_a_schema_never_migrated_is_one_line(database_url: URL) -> None:
    from ..cli.test_cli import alkstore

    proc = alkstore("metrics", "--port", "0", "--schema", "nowhere", url=database_url)
    assert "no alkstore tables in schema 'nowhere'" in one_line_error(proc, 1)


def test_b4_cli_metrics_port_in_use_is_one_line(database_url: URL) -> None:
    from ..cli.test_cli import alkstore

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(alkstore("metrics", "--port", str(port), url=database_url), 1)
    assert line.startswith(f"alkstore: cannot serve metrics on 127.0.0.1:{port}: ")
