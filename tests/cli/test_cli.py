"""The `alkstore` command, each command run as a subprocess against a real database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import URL, create_engine, inspect

from alkstore_sa import EnqueueOpts, Store

from .. import _pg
from .._outside import install_outside

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("alkstore")


def _text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _env(url: URL | str | None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ALKSTORE_DATABASE_URL", "ALKSTORE_SCHEMA", "ALKSTORE_TEST_DATABASE_URL")
    }
    if url is not None:
        env["ALKSTORE_DATABASE_URL"] = (
            url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        )
    env.update(extra)
    return env


def alkstore(
    *args: str,
    url: URL | str | None,
    cwd: Path = ROOT,
    stdin: bytes | None = None,
    **extra_env: str,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", *args],
        env=_env(url, **extra_env),
        cwd=cwd,
        input=stdin.decode("latin-1") if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The process failed with ``code`` and said why in one line, without a traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("alkstore: ")
    return lines[0]


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


# --- migrate --------------------------------------------------------------------------


def _tables(url: URL, schema: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names(schema=schema))
    finally:
        engine.dispose()


def test_m1_cli_migrate_installs_the_tables_and_is_rerunnable(blank_database: URL) -> None:
    first = alkstore("migrate", url=blank_database)
    assert first.returncode == 0, first.stderr
    assert "migrated" in first.stdout
    assert {"jobs", "dead_jobs", "alkstore_alembic_version"} <= _tables(blank_database, "alkstore")
    again = alkstore("migrate", url=blank_database)
    assert again.returncode == 0, again.stderr
    assert "already at head" in again.stdout


def test_m4_cli_migrate_schema_option_and_variable(blank_database: URL) -> None:
    by_option = alkstore("migrate", "--schema", "shop_a", url=blank_database)
    assert by_option.returncode == 0, by_option.stderr
    by_env = alkstore("migrate", url=blank_database, ALKSTORE_SCHEMA="shop_b")
    assert by_env.returncode == 0, by_env.stderr
    assert {"jobs", "dead_jobs"} <= _tables(blank_database, "shop_a")
    assert {"jobs", "dead_jobs"} <= _tables(blank_database, "shop_b")
    assert "jobs" not in _tables(blank_database, "alkstore")


def test_cli_global_options_work_before_and_after_the_command(blank_database: URL) -> None:
    rendered = blank_database.render_as_string(hide_password=False)
    before = alkstore("--database-url", rendered, "--schema", "s_one", "migrate", url=None)
    after = alkstore("migrate", "--database-url", rendered, "--schema", "s_two", url=None)
    assert before.returncode == 0 and after.returncode == 0, (before.stderr, after.stderr)
    assert "jobs" in _tables(blank_database, "s_one")
    assert "jobs" in _tables(blank_database, "s_two")


# --- enqueue ---------------------------------------------------------------------------


def test_cli_enqueue_prints_the_id_of_the_stored_job(database_url: URL, store_on: Store) -> None:
    proc = alkstore(
        "enqueue", "emails", "--payload", "héllo", "--priority", "7", "--delay", "60",
        "--max-attempts", "2", url=database_url,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job = store_on.queue("emails").get_job(int(proc.stdout.strip()))
    assert job is not None
    assert job.payload == "héllo".encode()
    assert (job.priority, job.max_attempts, job.status) == (7, 2, "pending")
    assert 59 <= (job.run_at - job.created_at).total_seconds() <= 61


def test_q5_cli_enqueue_payload_file_and_stdin_bytes_round_trip(
    database_url: URL, store_on: Store, tmp_path: Path
) -> None:
    raw = bytes(range(256)) + b"\x00end"
    path = tmp_path / "payload.bin"
    path.write_bytes(raw)
    from_file = alkstore("enqueue", "blobs", "--payload-file", str(path), url=database_url)
    assert from_file.returncode == 0, from_file.stderr
    text = b"line one\nline two\n"
    from_stdin = alkstore("enqueue", "blobs", "--payload-file", "-", url=database_url, stdin=text)
    assert from_stdin.returncode == 0, from_stdin.stderr
    q = store_on.queue("blobs")
    first = q.get_job(int(from_file.stdout))
    second = q.get_job(int(from_stdin.stdout))
    assert first is not None and first.payload == raw
    assert second is not None and second.payload == text


def test_cli_enqueue_needs_a_payload_source(database_url: URL) -> None:
    proc = alkstore("enqueue", "emails", url=database_url)
    assert proc.returncode == 2
    assert "--payload" in proc.stderr


def test_q3_cli_enqueue_invalid_option_is_a_usage_error(database_url: URL) -> None:
    line = one_line_error(
        alkstore("enqueue", "emails", "--payload", "x", "--max-attempts", "0", url=database_url),
        2,
    )
    assert "max_attempts" in line


def test_q2_cli_invalid_queue_name_is_a_usage_error(database_url: URL) -> None:
    line = one_line_error(alkstore("enqueue", "pg_jobs", "--payload", "x", url=database_url), 2)
    assert "reserved" in line


# --- sweep (stats and jobs: tests/cli/test_o8_cli.py) ---------------------------------------


def test_q25_cli_sweep_dead_letters_expired_then_purges_with_retention(
    database_url: URL, store_on: Store
) -> None:
    q = store_on.queue("sweepme")
    job_id = q.enqueue(b"late", EnqueueOpts(expires_in=0.05))
    keep = q.enqueue(b"fresh")
    time.sleep(0.1)
    proc = alkstore("sweep", "sweepme", url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sweepme: expired 1, purged 0"
    dead = q.get_job(job_id)
    assert dead is not None and (dead.status, dead.last_error) == ("dead", "expired")
    purge = alkstore("sweep", "sweepme", "--retention", "0", url=database_url)
    assert purge.returncode == 0, purge.stderr
    assert purge.stdout.strip() == "sweepme: expired 0, purged 1"
    assert q.get_job(job_id) is None
    fresh = q.get_job(keep)
    assert fresh is not None and fresh.status == "pending"


# --- worker ----------------------------------------------------------------------------


def _wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _start_worker(url: URL, *args: str, cwd: Path = ROOT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", "worker", *args],
        env=_env(url),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"worker did not stop on SIGTERM:\n{err}") from None
    return proc.returncode, err


def test_q27_cli_worker_runs_examples_tasks_and_exits_0_on_sigterm(
    database_url: URL, store_on: Store
) -> None:
    q = store_on.queue("emails")
    proc = _start_worker(database_url, "examples.tasks:worker")
    try:
        ok = q.enqueue(b"hello from the test")
        bad = q.enqueue(b"")  # examples.tasks dead-letters an empty body

        def drained() -> bool:
            dead = q.get_job(bad)
            return q.get_job(ok) is None and dead is not None and dead.status == "dead"

        _wait_for(drained)
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert f"sent email job={ok}" in err
    dead = q.get_job(bad)
    assert dead is not None and dead.last_error == "empty email body"


_SLOW_TASKS = """
import os, time
from alkstore_sa import Store, Worker

store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
slow = store.queue("slow")
LOG = os.path.join(os.path.dirname(__file__), "runs.log")

def handler(job):
    start = time.monotonic()
    time.sleep(0.4)
    with open(LOG, "a") as fh:
        fh.write(f"{start} {time.monotonic()}\\n")

worker = Worker({slow: handler}, concurrency=1, poll_interval=0.2)

def make(concurrency=1):
    return Worker({slow: handler}, concurrency=concurrency, poll_interval=0.2)
"""


def _max_overlap(log: Path) -> int:
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)


@pytest.mark.parametrize("obj", ["worker", "make"])
def test_q27_cli_worker_concurrency_overrides_the_definition(
    database_url: URL, store_on: Store, tmp_path: Path, obj: str
) -> None:
    (tmp_path / "slowtasks.py").write_text(textwrap.dedent(_SLOW_TASKS))
    q = store_on.queue("slow")
    ids = q.enqueue_many([b"1", b"2", b"3"])
    proc = _start_worker(database_url, f"slowtasks:{obj}", "--concurrency", "3", cwd=tmp_path)
    try:
        _wait_for(lambda: all(q.get_job(i) is None for i in ids))
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    # concurrency=1 in the module would run them one after another.
    assert _max_overlap(tmp_path / "runs.log") == 3


_ASYNC_TASKS = """
import os
from sqlalchemy.ext.asyncio import create_async_engine
from alkstore_sa import AsyncStore, AsyncWorker

store = AsyncStore(create_async_engine(os.environ["ALKSTORE_DATABASE_URL"]))
pings = store.queue("pings")
LOG = os.path.join(os.path.dirname(__file__), "pings.log")

async def handler(job, session):
    with open(LOG, "a") as fh:
        fh.write(f"{job.id}\\n")

worker = AsyncWorker({pings: handler}, poll_interval=0.2)
"""


def test_q27_cli_worker_runs_an_async_worker(
    database_url: URL, store_on: Store, tmp_path: Path
) -> None:
    (tmp_path / "asynctasks.py").write_text(textwrap.dedent(_ASYNC_TASKS))
    q = store_on.queue("pings")
    ids = q.enqueue_many([b"a", b"b"])
    proc = _start_worker(database_url, "asynctasks:worker", cwd=tmp_path)
    try:
        _wait_for(lambda: all(q.get_job(i) is None for i in ids))
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert sorted(map(int, (tmp_path / "pings.log").read_text().split())) == ids


# --- errors ----------------------------------------------------------------------------


def test_cli_missing_url_names_the_variable() -> None:
    for args in (["stats"], ["migrate"]):  # both paths to the database: Store and Alembic
        line = one_line_error(alkstore(*args, url=None), 2)
        assert "ALKSTORE_DATABASE_URL" in line


@pytest.mark.parametrize(
    "bad", ["not a url", "mysql://user@host/db", "postgresql+psycopg://u@host:port/db"]
)
def test_cli_bad_url_names_its_source(bad: str) -> None:
    assert "ALKSTORE_DATABASE_URL" in one_line_error(alkstore("stats", url=bad), 2)
    assert "--database-url" in one_line_error(alkstore("--database-url", bad, "stats", url=None), 2)


@pytest.mark.parametrize("driver", ["psycopg2"])
def test_o8_cli_url_of_another_driver_is_one_line(database_url: URL, driver: str) -> None:
    """This driver used to end in a traceback (a missing module).  asyncpg is taken
    by every command (V3: tests/cli/test_v3_cli.py)."""
    other = database_url.set(drivername=f"postgresql+{driver}")
    commands = [["stats"], ["jobs", "q"], ["migrate"], ["worker", "examples.tasks:worker"]]
    for args in commands:
        line = one_line_error(alkstore(*args, url=other), 2)
        assert f"'postgresql+{driver}'" in line and "postgresql+psycopg://" in line, line
        assert "ALKSTORE_DATABASE_URL" in line
    flag = one_line_error(alkstore("--database-url", _text(other), "stats", url=None), 2)
    assert "--database-url" in flag


def test_cli_bare_postgresql_url_means_psycopg(database_url: URL, store_on: Store) -> None:
    store_on.queue("bare").enqueue(b"x")
    bare = _text(database_url).replace("postgresql+psycopg://", "postgresql://", 1)
    assert bare.startswith("postgresql://")
    proc = alkstore("stats", "bare", "--json", url=bare)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bare"]["due"] == 1


def test_cli_unreachable_database_is_one_line(tmp_path: Path) -> None:
    # A socket directory with no server in it: refused at once, no network involved.
    url = URL.create(
        "postgresql+psycopg", username="x", database="x", query={"host": str(tmp_path)}
    )
    for args in (["migrate"], ["enqueue", "q", "--payload", "x"]):
        line = one_line_error(alkstore(*args, url=url), 1)
        assert "cannot connect" in line and "ALKSTORE_DATABASE_URL" in line


def test_cli_missing_schema_says_run_migrate(blank_database: URL) -> None:
    for args in (
        ["jobs", "q"],
        ["stats"],
        ["stats", "q"],
        ["enqueue", "q", "--payload", "x"],
        ["sweep"],
        ["sweep", "q"],
        ["worker", "examples.tasks:worker"],
    ):
        line = one_line_error(alkstore(*args, url=blank_database), 1)
        assert "run `alkstore migrate`" in line, args
        # ... and what a host application whose Alembic takes in our branch runs instead.
        assert "`alembic upgrade heads`" in line, args
    other = one_line_error(alkstore("stats", "--schema", "elsewhere", url=blank_database), 1)
    assert "run `alkstore migrate --schema elsewhere`" in other


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_such_module:worker", "no module named 'no_such_module'"),
        ("examples.no_such:worker", "no module named 'examples.no_such'"),
        ("examples.tasks:no_such", "has no attribute 'no_such'"),
        ("examples.tasks", "is not MODULE:OBJ"),
        ("examples.tasks:store", "not a Worker"),
        # A handler, not a worker: calling it used to end in a TypeError traceback.
        ("examples.tasks:send_email", "is send_email(job), a function that needs arguments"),
    ],
)
def test_cli_worker_import_path_that_does_not_resolve(
    database_url: URL, target: str, says: str
) -> None:
    line = one_line_error(alkstore("worker", target, url=database_url), 2)
    assert says in line


def test_cli_invalid_schema_name_is_a_usage_error(database_url: URL) -> None:
    line = one_line_error(alkstore("stats", "--schema", "no spaces", url=database_url), 2)
    assert "schema" in line


def _script(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], env=_env(None), capture_output=True, text=True, timeout=60
    )


def test_cli_console_script_is_installed() -> None:
    assert SCRIPT.exists(), "pip install -e . should have installed the `alkstore` script"
    helped = _script(["--help"])
    assert helped.returncode == 0
    for command in (
        "migrate", "worker", "enqueue", "stats", "jobs", "requeue", "purge", "pause", "resume",
        "sweep", "demo",
    ):  # fmt: skip
        assert command in helped.stdout
    bare = _script([])
    assert bare.returncode == 2 and "usage:" in bare.stderr


def test_cli_bench_runs_the_checkouts_suite_from_any_directory(
    pg_server: _pg.Server, tmp_path: Path
) -> None:
    # Same as `python -m bench` (which makes and drops its own database).
    url = pg_server.url(pg_server.maintenance_db)
    proc = alkstore("bench", "--only", "E1", "--e1", "20", "--no-pgqueuer", url=url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "E1 vs raw insert+notify" in proc.stdout
    helped = alkstore("bench", "--help", url=None, cwd=tmp_path)
    assert helped.returncode == 0 and "--only" in helped.stdout


def test_cli_bench_outside_a_checkout_says_it_needs_one(tmp_path: Path) -> None:
    outside = install_outside(tmp_path)  # as from a wheel: no bench/ next to the package
    for args in (["bench"], ["bench", "--only", "E1"], ["bench", "--help"]):
        line = one_line_error(
            alkstore(*args, url=None, cwd=outside.cwd, PYTHONPATH=outside.pythonpath), 2
        )
        assert "needs a source checkout" in line and "pip install -e '.[bench]'" in line
