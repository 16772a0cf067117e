"""O8: `alkstore stats`, `jobs`, `sweep` and `--app`, each run as a subprocess against a real
database (the helpers are tests/cli/test_cli.py's)."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import fields
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import URL

from alkstore_sa import EnqueueOpts, Job, QueueOpts, Store

from .test_cli import _env, _text, alkstore, one_line_error

STATS_KEYS = [
    "due",
    "scheduled",
    "processing",
    "lapsed",
    "expired",
    "dead",
    "oldest_due_age",
    "paused",
    "completed",  # R1: kept acked jobs
    "limits",  # F1: the queue's limits (None: none)
    "slots_in_use",  # F2: live claims
]


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


def _usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    """argparse's refusal: exit 2, its usage, one error line, no traceback."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: alkstore")
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def _every_state(store: Store) -> None:
    """Queue 'mixed': 2 due, 1 scheduled, 2 processing (1 lapsed), 1 expired, 1 dead."""
    quick = store.queue("mixed", QueueOpts(visibility_timeout=0.05))
    q = store.queue("mixed")
    q.enqueue(b"runs", EnqueueOpts(priority=9))
    assert (h := q.claim_one("w")) is not None and h.payload == b"runs"
    q.enqueue(b"dies", EnqueueOpts(priority=8))
    assert (h := q.claim_one("w")) is not None and h.fail("broken")
    # Claimed last: a claim made after its 50 ms would take it back (Q11).
    quick.enqueue(b"lapses", EnqueueOpts(priority=10))
    assert (h := q.claim_one("w")) is not None and h.payload == b"lapses"
    q.enqueue_many([b"due 1", b"due 2"])
    q.enqueue(b"later", EnqueueOpts(delay=3600))
    q.enqueue(b"too late", EnqueueOpts(expires_in=0.05))
    store.queue("other").enqueue(b"x")
    time.sleep(0.2)


# --- stats --------------------------------------------------------------------------------


def test_o8_cli_stats_counts_each_state(database_url: URL, store_on: Store) -> None:
    _every_state(store_on)
    proc = alkstore("stats", "mixed", "--json", url=database_url)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc) == ["mixed"]
    mixed = doc["mixed"]
    assert list(mixed) == STATS_KEYS
    expected = {"due": 2, "scheduled": 1, "processing": 2, "lapsed": 1, "expired": 1, "dead": 1}
    assert {k: mixed[k] for k in expected} == expected
    assert 0.15 < mixed["oldest_due_age"] < 30
    assert mixed["paused"] is False

    table = alkstore("stats", "mixed", url=database_url)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.strip().splitlines()
    assert header.split() == [
        "queue", "due", "scheduled", "processing", "lapsed", "expired", "dead", "oldest", "due",
        "paused",
    ]  # fmt: skip
    assert row.split()[:7] == ["mixed", "2", "1", "2", "1", "1", "1"]
    assert row.split()[-1] == "no"


def test_o8_cli_stats_without_queues_shows_every_queue(database_url: URL, store_on: Store) -> None:
    assert alkstore("stats", "--json", url=database_url).stdout.strip() == "{}"
    assert "no queues in schema 'alkstore'" in alkstore("stats", url=database_url).stdout
    _every_state(store_on)
    doc = json.loads(alkstore("stats", "--json", url=database_url).stdout)
    assert list(doc) == ["mixed", "other"]
    assert doc["other"]["due"] == 1
    # A queue named but without rows is all zeros.
    named = json.loads(alkstore("stats", "zzz", "other", "--json", url=database_url).stdout)
    assert list(named) == ["zzz", "other"]
    assert named["zzz"] == dict.fromkeys(STATS_KEYS[:6], 0) | {
        "oldest_due_age": 0.0,
        "paused": False,
        "completed": 0,
        "limits": None,
        "slots_in_use": 0,
    }
    # A paused queue without rows is a queue too (O6), and its stats say it is paused.
    store_on.queue("zzz").pause()
    doc = json.loads(alkstore("stats", "--json", url=database_url).stdout)
    assert list(doc) == ["mixed", "other", "zzz"]
    assert doc["zzz"]["paused"] is True and doc["mixed"]["paused"] is False


def test_o8_cli_stats_watch_redraws_until_ctrl_c(database_url: URL, store_on: Store) -> None:
    store_on.queue("watched").enqueue(b"x")
    proc = subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", "stats", "--watch", "0.1", "--json"],
        env=_env(database_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A runner started in the background may ignore SIGINT; the child must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        store_on.queue("watched").enqueue(b"y")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            later = json.loads(proc.stdout.readline())  # one document per round
            if later["watched"]["due"] == 2:
                break
        assert first["watched"]["due"] == 1 and later["watched"]["due"] == 2
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_o8_cli_stats_watch_interval_must_be_positive(value: str) -> None:
    assert "--watch" in _usage_error(alkstore("stats", "--watch", value, url=None))


# --- jobs ---------------------------------------------------------------------------------


def _as_json(job: Job) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fields(job):
        value = getattr(job, f.name)
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif f.name == "errors":  # B2: a list of objects
            value = [
                {
                    "attempt": e.attempt,
                    "at": e.at.isoformat(),
                    "error": e.error,
                    "traceback": e.traceback,
                }
                for e in value
            ]
        elif isinstance(value, tuple):  # G1's waiting_on: a JSON array
            value = list(value)
        out[f.name] = value
    return out


def test_o8_cli_jobs_lists_live_and_dead_newest_first(database_url: URL, store_on: Store) -> None:
    _every_state(store_on)
    q = store_on.queue("mixed")
    proc = alkstore("jobs", "mixed", "--json", url=database_url)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    ids = [j["id"] for j in listed]
    assert len(ids) == 7 and ids == sorted(ids, reverse=True)
    assert any(item["errors"] for item in listed)  # the dead rows have a history
    for item in listed:
        job = q.get_job(item["id"])
        # V3: not task envelopes, so base64 (payload_encoding says so)
        assert job is not None and item == {**_as_json(job), "payload_encoding": "base64"}
        assert base64.b64decode(item["payload"]) == job.payload
        assert datetime.fromisoformat(item["created_at"]) == job.created_at
    assert {j["status"] for j in listed} == {"pending", "processing", "dead"}

    dead = json.loads(
        alkstore("jobs", "mixed", "--status", "dead", "--json", url=database_url).stdout
    )
    assert [(j["payload"], j["last_error"]) for j in dead] == [
        (base64.b64encode(b"dies").decode(), "broken")
    ]
    two = json.loads(alkstore("jobs", "mixed", "--limit", "2", "--json", url=database_url).stdout)
    assert [j["id"] for j in two] == ids[:2]
    page = alkstore("jobs", "mixed", "--before", str(ids[1]), "--json", url=database_url)
    assert [j["id"] for j in json.loads(page.stdout)] == ids[2:]

    table = alkstore("jobs", "mixed", "--status", "processing", url=database_url)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.strip().splitlines()
    assert header.split() == [
        "id", "status", "attempts", "priority", "run_at", "died_at", "last_error"
    ]  # fmt: skip
    assert [r.split()[1:3] for r in rows] == [["processing", "1/5"]] * 2


def test_o8_cli_jobs_of_a_queue_without_rows(database_url: URL) -> None:
    assert alkstore("jobs", "nothing", "--json", url=database_url).stdout.strip() == "[]"
    proc = alkstore("jobs", "nothing", "--status", "dead", url=database_url)
    assert proc.returncode == 0 and proc.stdout.strip() == "no dead jobs in queue 'nothing'"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["jobs"], "QUEUE"),
        (["jobs", "q", "--limit", "0"], "--limit"),
        (["jobs", "q", "--limit", "1001"], "--limit"),
        (["jobs", "q", "--status", "lost"], "--status"),
        (["jobs", "q", "--before", "x"], "--before"),
    ],
)
def test_o8_cli_jobs_malformed_command_line(args: list[str], says: str) -> None:
    assert says in _usage_error(alkstore(*args, url=None))


def test_o8_cli_invalid_queue_names_are_one_line(database_url: URL) -> None:
    for args in (["jobs", "pg_x"], ["stats", "ok", "pg_x"], ["sweep", "alkstore_q"]):
        line = one_line_error(alkstore(*args, url=database_url), 2)
        assert "reserved" in line, args


# --- sweep --------------------------------------------------------------------------------


def test_o8_cli_sweep_without_queues_sweeps_every_queue(database_url: URL, store_on: Store) -> None:
    for name in ("b_queue", "a_queue"):
        store_on.queue(name).enqueue(b"late", EnqueueOpts(expires_in=0.05))
    store_on.queue("c_queue").enqueue(b"fine")
    time.sleep(0.1)
    proc = alkstore("sweep", url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "a_queue: expired 1, purged 0",
        "b_queue: expired 1, purged 0",
        "c_queue: expired 0, purged 0",
    ]
    # The dead rows count as rows of their queue: swept (and purged) too.
    purge = alkstore("sweep", "--retention", "0", url=database_url)
    assert purge.stdout.splitlines()[:2] == [
        "a_queue: expired 0, purged 1",
        "b_queue: expired 0, purged 1",
    ]
    empty = alkstore("sweep", url=database_url)
    assert empty.returncode == 0 and empty.stdout.strip().endswith("c_queue: expired 0, purged 0")


def test_o8_cli_sweep_bad_retention_is_one_line(database_url: URL) -> None:
    assert "dead_letter_retention" in one_line_error(
        alkstore("sweep", "--retention", "-1", url=database_url), 2
    )


# --- --app --------------------------------------------------------------------------------

_APP = """
import os
from sqlalchemy.ext.asyncio import create_async_engine
from alkstore_sa import AsyncStore, AsyncWorker, QueueOpts, Store, Worker

URL = os.environ["ALKSTORE_DATABASE_URL"]  # set from --database-url by the command
SCHEMA = os.environ.get("ALKSTORE_SCHEMA") or "alkstore"
store = Store.from_url(URL, schema=SCHEMA)
emails = store.queue("emails", QueueOpts(priority=7, max_attempts=2, dead_letter_retention=0))

def send(job):
    pass

worker = Worker({emails: send})

def make():
    return Worker({emails: send})

def make_store():
    return store

astore = AsyncStore(create_async_engine(URL), schema=SCHEMA)

async def asend(job):
    pass

aworker = AsyncWorker({astore.queue("texts", QueueOpts(priority=3)): asend})
not_a_worker = 42
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "opsapp.py").write_text(textwrap.dedent(_APP))
    return tmp_path


def _app_cli(url: URL, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The URL only on the command line: --app passes it to the module's environment.
    return alkstore(*args, "--database-url", _text(url), url=None, cwd=cwd)


@pytest.mark.parametrize(
    ("target", "queue", "priority"),
    [("opsapp:worker", "emails", 7), ("opsapp:make", "emails", 7), ("opsapp:aworker", "texts", 3)],
)
def test_o8_cli_app_stamps_enqueue_with_the_applications_options(
    database_url: URL, store_on: Store, app_dir: Path, target: str, queue: str, priority: int
) -> None:
    proc = _app_cli(database_url, app_dir, "enqueue", queue, "--payload", "x", "--app", target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    job = store_on.queue(queue).get_job(int(proc.stdout))
    assert job is not None and job.priority == priority
    if queue == "emails":
        assert job.max_attempts == 2


def test_o8_cli_app_retention_applies_to_sweep(
    database_url: URL, store_on: Store, app_dir: Path
) -> None:
    for name in ("emails", "others"):
        q = store_on.queue(name)
        q.enqueue(b"x")
        handle = q.claim_one("w")
        assert handle is not None and handle.fail("gone")
    # Without --app the default options keep dead rows.
    assert _app_cli(database_url, app_dir, "sweep").stdout.splitlines() == [
        "emails: expired 0, purged 0",
        "others: expired 0, purged 0",
    ]
    # --retention wins over the application's dead_letter_retention=0.
    kept = _app_cli(database_url, app_dir, "sweep", "--app", "opsapp:worker", "--retention", "3600")
    assert kept.stdout.splitlines()[0] == "emails: expired 0, purged 0"
    swept = _app_cli(database_url, app_dir, "sweep", "--app", "opsapp:worker")
    assert swept.returncode == 0, swept.stderr
    assert swept.stdout.splitlines() == [
        "emails: expired 0, purged 1",  # the application's retention: 0
        "others: expired 0, purged 0",  # not the application's queue: defaults
    ]
    assert swept.stderr == ""  # no queue was named, so none is warned about


def test_o8_cli_app_sweep_without_queues_sweeps_the_applications_queues_too(
    database_url: URL, store_on: Store, app_dir: Path
) -> None:
    # As `stats`: the application's queues count even before they have rows.
    assert _app_cli(database_url, app_dir, "sweep").stdout == "no queues in schema 'alkstore'\n"
    store_on.queue("others").enqueue(b"x")
    swept = _app_cli(database_url, app_dir, "sweep", "--app", "opsapp:worker")
    assert swept.returncode == 0, swept.stderr
    assert swept.stdout.splitlines() == [
        "emails: expired 0, purged 0",
        "others: expired 0, purged 0",
    ]


def test_o8_cli_app_warns_about_a_queue_it_does_not_declare(
    database_url: URL, app_dir: Path
) -> None:
    # Without names, stats shows the application's queues even before they have rows.
    doc = json.loads(
        _app_cli(database_url, app_dir, "stats", "--json", "--app", "opsapp:worker").stdout
    )
    assert list(doc) == ["emails"]
    for args in (
        ["stats", "emails", "typo"],
        ["jobs", "typo"],
        ["sweep", "typo"],
        ["enqueue", "typo", "--payload", "x"],
    ):
        proc = _app_cli(database_url, app_dir, *args, "--app", "opsapp:worker")
        assert proc.returncode == 0, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("alkstore: warning: queue 'typo' is not one of opsapp:worker")
        assert "(emails)" in lines[0]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("opsapp:not_a_worker", "is a int, not a Worker or AsyncWorker"),
        ("opsapp:make_store", "returned a Store, not a Worker or AsyncWorker"),
        ("opsapp:send", "is send(job), a function that needs arguments"),
        ("opsapp:missing", "has no attribute 'missing'"),
        ("no_such_app:worker", "no module named 'no_such_app'"),
        ("opsapp", "is not MODULE:OBJ"),
    ],
)
def test_o8_cli_app_that_is_not_an_application_is_one_line(
    database_url: URL, app_dir: Path, target: str, says: str
) -> None:
    for args in (["stats"], ["jobs", "q"], ["sweep"], ["enqueue", "q", "--payload", "x"]):
        line = one_line_error(_app_cli(database_url, app_dir, *args, "--app", target), 2)
        assert says in line, (args, line)
