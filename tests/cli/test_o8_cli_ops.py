"""O8: `alkstore requeue`, `purge`, `pause` and `resume`, each run as a subprocess against a
real database (the helpers are tests/cli/test_cli.py's and tests/cli/test_o8_cli.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import URL

from alkstore_sa import Store

from .test_cli import ROOT, _env, alkstore, one_line_error
from .test_o8_cli import _APP, _app_cli, _usage_error


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


def _dead(store: Store, queue: str, n: int, error: str = "bad payload") -> list[int]:
    """``n`` jobs of ``queue`` claimed and failed: dead letters, oldest first."""
    q = store.queue(queue)
    q.enqueue_many([f"job {i}".encode() for i in range(n)])
    handles = q.claim_batch("w", n)
    assert len(handles) == n
    for h in handles:
        assert h.fail(error)
    return [h.id for h in handles]


def _out(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stderr == ""
    return proc.stdout


# --- requeue ------------------------------------------------------------------------------


def test_o8_requeue_all_moves_dead_jobs_back(database_url: URL, store_on: Store) -> None:
    ids = _dead(store_on, "emails", 3)
    _dead(store_on, "others", 1)
    assert _out(alkstore("requeue", "emails", "--all", url=database_url)) == (
        "emails: requeued 3 dead jobs\n"
    )
    q = store_on.queue("emails")
    stats = q.stats()
    assert (stats.due, stats.dead) == (3, 0)
    for job_id in ids:  # the same ids, back to pending with their error kept (O2)
        job = q.get_job(job_id)
        assert job is not None and job.status == "pending" and job.attempts == 0
        assert job.last_error == "bad payload"
    assert store_on.queue("others").stats().dead == 1  # another queue's dead stay
    again = alkstore("requeue", "emails", "--all", url=database_url)
    assert _out(again) == "emails: requeued 0 dead jobs\n"


def test_o8_requeue_all_limit_moves_the_oldest_and_says_more_may_be_left(
    database_url: URL, store_on: Store
) -> None:
    ids = _dead(store_on, "emails", 3)
    proc = alkstore("requeue", "emails", "--all", "--limit", "2", url=database_url)
    assert _out(proc) == (
        "emails: requeued 2 dead jobs (--limit 2 reached: more may be left, run it again)\n"
    )
    live = {j.id for j in store_on.queue("emails").jobs("pending")}
    assert live == set(ids[:2])  # oldest first (died_at, then id)


def test_o8_requeue_ids_moves_those_and_says_how_many_were_skipped(
    database_url: URL, store_on: Store
) -> None:
    ids = _dead(store_on, "emails", 3)
    other = _dead(store_on, "others", 1)
    proc = alkstore("requeue", "emails", str(ids[0]), str(ids[2]), url=database_url)
    assert _out(proc) == "emails: requeued 2 dead jobs\n"
    assert [j.id for j in store_on.queue("emails").jobs("dead")] == [ids[1]]
    # Ids that are not dead rows of this queue (live now, another queue's, unknown) are skipped.
    skipped = alkstore("requeue", "emails", str(ids[0]), str(other[0]), "999999", url=database_url)
    assert _out(skipped) == (
        "emails: requeued 0 dead jobs; all 3 ids given were skipped "
        "(not a dead job of this queue)\n"
    )
    assert store_on.queue("others").stats().dead == 1
    one = alkstore("requeue", "emails", str(ids[1]), str(ids[1]), "999999", url=database_url)
    assert _out(one) == (
        "emails: requeued 1 dead job; 1 of the 2 ids given was skipped "
        "(not a dead job of this queue)\n"
    )


# --- purge --------------------------------------------------------------------------------


def test_o8_purge_ids_deletes_those_without_asking(database_url: URL, store_on: Store) -> None:
    ids = _dead(store_on, "emails", 3)
    proc = alkstore("purge", "emails", str(ids[0]), str(ids[1]), url=database_url)
    assert _out(proc) == "emails: purged 2 dead jobs\n"
    assert [j.id for j in store_on.queue("emails").jobs()] == [ids[2]]
    gone = alkstore("purge", "emails", str(ids[0]), url=database_url)
    assert _out(gone) == (
        "emails: purged 0 dead jobs; the id given was skipped (not a dead job of this queue)\n"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--all"], "every dead job of queue 'emails'; pass --yes"),
        (["--older-than", "0"], "every dead job of queue 'emails' that died more than 0 s ago"),
        (["--all", "--older-than", "60"], "that died more than 60 s ago; pass --yes"),
    ],
)
def test_o8_purge_of_every_dead_job_without_yes_refuses_when_stdin_is_not_a_terminal(
    database_url: URL, store_on: Store, args: list[str], says: str
) -> None:
    _dead(store_on, "emails", 2)
    line = one_line_error(alkstore("purge", "emails", *args, url=database_url), 2)
    assert says in line and "not a terminal" in line
    assert store_on.queue("emails").stats().dead == 2  # nothing deleted


def test_o8_purge_all_yes_deletes_every_dead_job_of_the_queue(
    database_url: URL, store_on: Store
) -> None:
    _dead(store_on, "emails", 3)
    _dead(store_on, "others", 1)
    proc = alkstore("purge", "emails", "--all", "--yes", url=database_url)
    assert _out(proc) == "emails: purged 3 dead jobs\n"
    assert store_on.queue("emails").stats().dead == 0
    assert store_on.queue("others").stats().dead == 1


def test_o8_purge_older_than_keeps_the_recently_dead(database_url: URL, store_on: Store) -> None:
    _dead(store_on, "emails", 2)
    kept = alkstore("purge", "emails", "--older-than", "3600", "--yes", url=database_url)
    assert _out(kept) == "emails: purged 0 dead jobs\n"
    assert store_on.queue("emails").stats().dead == 2
    gone = alkstore("purge", "emails", "--older-than", "0", "--yes", url=database_url)
    assert _out(gone) == "emails: purged 2 dead jobs\n"


def _on_a_terminal(url: URL, answer: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command with a terminal as its stdin, ``answer`` already typed there."""
    controller, terminal = os.openpty()
    try:
        os.write(controller, answer)
        proc = subprocess.run(
            [sys.executable, "-m", "alkstore_sa.cli", *args],
            env=_env(url),
            cwd=ROOT,
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return proc


@pytest.mark.parametrize("answer", [b"n\n", b"\n", b"whatever\n", b"\x04"])  # \x04: Ctrl-D
def test_o8_purge_on_a_terminal_asks_and_anything_but_yes_keeps_them(
    database_url: URL, store_on: Store, answer: bytes
) -> None:
    _dead(store_on, "emails", 2)
    proc = _on_a_terminal(database_url, answer, "purge", "emails", "--all")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr == (
        "Delete all 2 dead jobs of queue 'emails'? [y/N] alkstore: nothing purged\n"
    )
    assert store_on.queue("emails").stats().dead == 2


@pytest.mark.parametrize("answer", [b"y\n", b"YES\n"])
def test_o8_purge_on_a_terminal_deletes_them_when_told_yes(
    database_url: URL, store_on: Store, answer: bytes
) -> None:
    _dead(store_on, "emails", 2)
    proc = _on_a_terminal(database_url, answer, "purge", "emails", "--older-than", "0")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stderr == (
        "Delete the dead jobs of queue 'emails' that died more than 0 s ago (of 2 now)? [y/N] "
    )
    assert proc.stdout == "emails: purged 2 dead jobs\n"
    assert store_on.queue("emails").stats().dead == 0


# --- pause, resume ------------------------------------------------------------------------


def test_o8_pause_and_resume_say_whether_they_changed_the_state(
    database_url: URL, store_on: Store
) -> None:
    q = store_on.queue("emails")
    q.enqueue(b"x")
    assert _out(alkstore("pause", "emails", url=database_url)) == "emails: paused\n"
    assert q.stats().paused is True and q.claim_one("w") is None
    assert _out(alkstore("pause", "emails", url=database_url)) == "emails: already paused\n"
    table = _out(alkstore("stats", "emails", url=database_url)).splitlines()
    assert table[0].split()[-1] == "paused" and table[1].split()[-1] == "yes"
    assert _out(alkstore("resume", "emails", url=database_url)) == "emails: resumed\n"
    assert q.stats().paused is False
    assert _out(alkstore("resume", "emails", url=database_url)) == "emails: was not paused\n"
    assert q.claim_one("w") is not None


def test_o8_pause_of_a_queue_without_rows_makes_it_a_queue(
    database_url: URL, store_on: Store
) -> None:
    # Queues are names (O4): pausing one before it has jobs is allowed, and stats list it (O6).
    assert _out(alkstore("pause", "later", url=database_url)) == "later: paused\n"
    assert store_on.queue_names() == ["later"]


# --- --app ----------------------------------------------------------------------------------


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "opsapp.py").write_text(textwrap.dedent(_APP))
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ["requeue", "typo", "--all"],
        ["requeue", "typo", "1"],
        ["purge", "typo", "1"],
        ["purge", "typo", "--all", "--yes"],
        ["pause", "typo"],
        ["resume", "typo"],
    ],
)
def test_o8_ops_app_warns_about_a_queue_it_does_not_declare(
    database_url: URL, app_dir: Path, args: list[str]
) -> None:
    proc = _app_cli(database_url, app_dir, *args, "--app", "opsapp:worker")
    assert proc.returncode == 0, (args, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == (
        "alkstore: warning: queue 'typo' is not one of opsapp:worker's queues (emails)"
    )
    assert proc.stdout.startswith("typo: ")
    declared = _app_cli(database_url, app_dir, args[0], "emails", *args[2:], "--app", "opsapp:make")
    assert declared.returncode == 0 and declared.stderr == "", declared.stderr


@pytest.mark.parametrize("target", ["opsapp:not_a_worker", "opsapp:missing", "opsapp"])
def test_o8_ops_app_that_is_not_an_application_is_one_line(
    database_url: URL, app_dir: Path, target: str
) -> None:
    for args in (["requeue", "q", "--all"], ["purge", "q", "1"], ["pause", "q"], ["resume", "q"]):
        one_line_error(_app_cli(database_url, app_dir, *args, "--app", target), 2)


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["requeue"], "QUEUE"),
        (["requeue", "q"], "give the ids of the dead jobs to requeue, or --all"),
        (["requeue", "q", "1", "--all"], "give job ids or --all, not both"),
        (["requeue", "q", "x"], "a job id is a whole number, got 'x'"),
        (["requeue", "q", "1.5"], "a job id is a whole number"),
        (["requeue", "q", "0"], "no job has the id 0"),
        (["requeue", "q", str(2**63)], "no job has the id"),
        (["requeue", "q", "--all", "--limit", "0"], "--limit: must be at least 1"),
        (["requeue", "q", "--all", "--limit", "10001"], "--limit: must be at most 10000"),
        (["requeue", "q", "--all", "--limit", "many"], "--limit"),
        (["purge", "q"], "give the ids of the dead jobs to purge, --all or --older-than SECS"),
        (["purge", "q", "1", "--all"], "give job ids or --all, not both"),
        (["purge", "q", "1", "two"], "a job id is a whole number, got 'two'"),
        (["purge", "q", "--older-than", "-1"], "--older-than: must be >= 0 seconds"),
        (["purge", "q", "--older-than", "nan"], "--older-than: must be finite"),
        (["purge", "q", "--older-than", "1e10"], "--older-than: must be at most"),
        (["purge", "q", "--older-than", "soon"], "expected seconds, got 'soon'"),
        (["pause"], "QUEUE"),
        (["resume", "a", "b"], "unrecognized arguments: b"),
    ],
)
def test_o8_ops_malformed_command_line_is_usage_and_one_line(args: list[str], says: str) -> None:
    # Refused before anything needs a database: no URL is set.
    line = _usage_error(alkstore(*args, url=None))
    assert says in line, line


def test_o8_ops_invalid_queue_name_is_one_line(database_url: URL) -> None:
    for args in (
        ["requeue", "pg_x", "--all"],
        ["purge", "pg_x", "--all", "--yes"],
        ["pause", "alkstore_q"],
        ["resume", "x" * 300],
    ):
        line = one_line_error(alkstore(*args, url=database_url), 2)
        assert "queue name" in line, (args, line)


def test_o8_ops_unreachable_database_is_one_line(tmp_path: Path) -> None:
    # A socket directory with no server in it: refused at once, no network involved.
    url = URL.create(
        "postgresql+psycopg", username="x", database="x", query={"host": str(tmp_path)}
    )
    for args in (
        ["requeue", "q", "--all"],
        ["purge", "q", "1"],
        ["purge", "q", "--all", "--yes"],
        ["pause", "q"],
        ["resume", "q"],
    ):
        line = one_line_error(alkstore(*args, url=url), 1)
        assert "cannot connect" in line and "ALKSTORE_DATABASE_URL" in line, args
    for args in (["requeue", "q", "--all"], ["pause", "q"]):
        assert "ALKSTORE_DATABASE_URL" in one_line_error(alkstore(*args, url=None), 2)


def test_o8_ops_on_a_schema_never_migrated_say_run_migrate(blank_database: URL) -> None:
    for args in (["requeue", "q", "--all"], ["purge", "q", "--all", "--yes"], ["pause", "q"]):
        line = one_line_error(alkstore(*args, url=blank_database), 1)
        assert "alkstore migrate" in line, (args, line)
