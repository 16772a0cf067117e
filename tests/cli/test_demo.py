"""`alkstore demo` end to end: the project's main job, run the way a new user runs it."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import psutil
from sqlalchemy import URL, create_engine, inspect

from alkstore_sa.cli._progress import Progress

from .._outside import install_outside

ROOT = Path(__file__).resolve().parents[2]


def _env(url: URL | None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ALKSTORE_DATABASE_URL", "ALKSTORE_SCHEMA", "ALKSTORE_TEST_DATABASE_URL")
    }
    if url is not None:
        env["ALKSTORE_DATABASE_URL"] = url.render_as_string(hide_password=False)
    env.update(extra)
    return env


def demo(
    *args: str, url: URL | None = None, cwd: Path = ROOT, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "demo", *args],
        env=_env(url, **extra_env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=110,
    )


def _row(stdout: str, label: str) -> str:
    match = re.search(rf"^\s+{label}\s+(.+)$", stdout, re.MULTILINE)
    assert match, f"no {label!r} row in:\n{stdout}"
    return match.group(1)


def _assert_final_table(stdout: str, orders: int) -> None:
    assert int(_row(stdout, "orders placed").split()[0]) == orders
    assert int(_row(stdout, "jobs done").split()[0]) == orders - 1
    assert int(_row(stdout, "retried").split()[0]) == len(
        [i for i in range(orders) if i % 25 == 7 and i != orders // 2]
    )
    assert int(_row(stdout, "dead").split()[0]) == 1
    assert _row(stdout, "left in queue") == "0"
    assert re.match(r"[\d,]+ jobs/s", _row(stdout, "throughput"))
    assert re.match(r"p50 [\d.]+ ms\s+p99 [\d.]+ ms", _row(stdout, "wake latency"))
    assert "550 5.1.1 no such mailbox" in stdout
    assert re.search(r"check: .*: ok$", stdout, re.MULTILINE)


def _next_steps(stdout: str) -> tuple[Path, list[list[str]]]:
    """The demo's last words: where its code is, and three commands to try next."""
    code = re.search(r"^the demo's code: (.+)$", stdout, re.MULTILINE)
    assert code, stdout
    commands = [
        shlex.split(line.split("#", 1)[0])
        for line in stdout.split(code.group(0), 1)[1].splitlines()
        if line.startswith("  alkstore ")
    ]
    assert [c[:2] for c in commands] == [
        ["alkstore", "migrate"],
        ["alkstore", "enqueue"],
        ["alkstore", "stats"],
    ]
    return Path(code.group(1)), commands


def test_demo_runs_on_a_throwaway_postgres_and_removes_it(tmp_path: Path) -> None:
    # As a wheel's user runs it: the package alone, from an empty directory.
    outside = install_outside(tmp_path)
    proc = demo("--orders", "200", cwd=outside.cwd, PYTHONPATH=outside.pythonpath)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_final_table(proc.stdout, 200)
    source, _ = _next_steps(proc.stdout)
    assert source == Path(outside.pythonpath) / "alkstore_sa" / "demo" / "receipts.py"
    started = re.search(r"starting a throwaway PostgreSQL in (\S+)", proc.stderr)
    assert started, proc.stderr
    tmp = started.group(1)
    assert f"{tmp} removed" in proc.stderr
    assert not Path(tmp).exists()
    leftovers = [
        p.info["pid"]
        for p in psutil.process_iter(attrs=["pid", "cmdline"])
        if any(tmp in part for part in (p.info["cmdline"] or []))
    ]
    assert leftovers == [], "the embedded server outlived the demo"
    # Not a terminal: progress comes as plain periodic lines, never carriage returns.
    assert "\r" not in proc.stderr
    assert re.search(r"^receipts \[[#\-█░]+\] 200/200 100%", proc.stderr, re.MULTILINE)


def test_demo_on_a_given_database_cleans_up_its_schemas(blank_database: URL) -> None:
    proc = demo("--orders", "60", "--concurrency", "3", url=blank_database)
    assert proc.returncode == 0, proc.stderr
    assert "throwaway" not in proc.stderr  # it used the database it was given
    _assert_final_table(proc.stdout, 60)
    engine = create_engine(blank_database)
    try:
        schemas = set(inspect(engine).get_schema_names())
    finally:
        engine.dispose()
    assert not {"alkstore_demo", "alkstore_demo_shop"} & schemas
    # The commands it suggests work, in that order, on the database it was given.
    source, commands = _next_steps(proc.stdout)
    assert source == ROOT / "alkstore_sa" / "demo" / "receipts.py"
    for command in commands:
        tried = subprocess.run(
            [sys.executable, "-m", "alkstore_sa.cli", *command[1:]],
            env=_env(blank_database),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert tried.returncode == 0, (command, tried.stderr)
    assert tried.stdout.split("\n")[1].split()[:2] == ["emails", "1"]  # stats: 1 due


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_progress_redraws_in_place_on_a_terminal() -> None:
    out = _Tty()
    bar = Progress("receipts", 10, out, width=10, min_interval=0)
    bar.update(5, "half")
    bar.update(10, "all", force=True)
    bar.close()
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 2  # each draw erases the line it replaces
    assert "5/10  50%  half" in text and "10/10 100%  all" in text
    assert text.endswith("\n")


def test_demo_is_quiet_about_its_deliberate_retries_unless_verbose(blank_database: URL) -> None:
    quiet = demo("--orders", "60", url=blank_database)
    assert quiet.returncode == 0, quiet.stderr
    _assert_final_table(quiet.stdout, 60)  # the summary counts them instead
    assert "retrying in" not in quiet.stderr and "dead-lettered" not in quiet.stderr, quiet.stderr
    loud = demo("--orders", "60", "--verbose", url=blank_database)
    assert loud.returncode == 0, loud.stderr
    retried = int(_row(loud.stdout, "retried").split()[0])
    assert loud.stderr.count("retrying in") == retried > 0, loud.stderr
    assert "dead-lettered" in loud.stderr


def test_demo_log_line_never_shares_the_bars_line() -> None:
    import io
    import logging

    from alkstore_sa.cli import _demo_log

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = Progress("receipts", 10, out, min_interval=0)
    handler = _demo_log.DemoLogHandler(out)
    handler.progress = bar
    log = logging.getLogger("alkstore.test.demo")
    log.addHandler(handler)
    log.propagate = False
    try:
        bar.update(3)
        log.warning("a line of its own")
        bar.update(4)
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    # The bar is erased (\r + erase line) before the record, then redrawn after it.
    assert "3/10" in text and "\r\x1b[2Ka line of its own\n\r\x1b[2Kreceipts [" in text, repr(text)
