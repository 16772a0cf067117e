"""W1: ``alkstore web`` serves the dashboard and prints its URL; bad input is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from sqlalchemy import URL

from alkstore_sa import Store

from ..conftest import ROOT


def _env(url: URL, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_WEB_")}
    env["ALKSTORE_DATABASE_URL"] = url.render_as_string(hide_password=False)
    env.update(extra)
    return env


def _popen(url: URL, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "alkstore_sa.cli", "web", *args],
        env=_env(url, **env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _served(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("serving the alkstore dashboard at "):
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"no URL: {line!r}; exit {proc.returncode}: {err}")
    return line.split(" at ", 1)[1].split()[0]


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"did not stop:\n{err}") from None
    return proc.returncode, err


def _get(url: str, **headers: str) -> Any:
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)


def test_w1_cli_web_serves_the_dashboard_and_prints_its_url(
    database_url: URL, store: Store
) -> None:
    store.queue("cli-web").enqueue(b"x")
    proc = _popen(database_url, "--port", "0")
    try:
        url = _served(proc)
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        page = _get(url).read().decode()
        assert 'data-queue="cli-web"' in page and "data-action" not in page.split("<main>")[0]
        assert 'data-action="pause"' in _get(url + "queues/cli-web").read().decode()
    finally:
        code, err = _stop(proc)
    assert code == 0 and "Traceback" not in err, err


def test_w1_cli_web_read_only_and_basic_auth(database_url: URL, store: Store) -> None:
    store.queue("cli-ro").enqueue(b"x")
    proc = _popen(
        database_url,
        "--port",
        "0",
        "--read-only",
        ALKSTORE_WEB_USER="ops",
        ALKSTORE_WEB_PASSWORD="pw",
    )
    try:
        url = _served(proc)
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(url)
        assert refused.value.code == 401
        auth = "Basic b3BzOnB3"  # ops:pw
        page = _get(url + "queues/cli-ro", Authorization=auth).read().decode()
        assert "data-action" not in page and "read-only" in page
    finally:
        code, err = _stop(proc)
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--port", "70000"], {}, "a port is 0..65535"),
        (["--port", "x"], {}, "a port is a whole number"),
        ([], {"ALKSTORE_WEB_USER": "ops"}, "ALKSTORE_WEB_PASSWORD is not set"),
        ([], {"ALKSTORE_WEB_PASSWORD": "pw"}, "ALKSTORE_WEB_USER is not set"),
        (["--host", "256.0.0.1", "--port", "0"], {}, "cannot serve on 256.0.0.1:0"),
    ],
)
def test_w1_cli_web_bad_input_is_one_line_and_non_zero(
    database_url: URL, store: Store, args: list[str], env: dict[str, str], says: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "web", *args],
        env=_env(database_url, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("alkstore")]) == 1


def test_w1_cli_web_on_a_database_never_migrated_is_one_line(blank_database: URL) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "web", "--port", "0"],
        env=_env(blank_database),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "alkstore migrate" in proc.stderr


def test_w1_core_never_imports_the_web_extra() -> None:
    code = (
        "import sys, alkstore_sa, alkstore_sa.worker, alkstore_sa.cli;"
        "bad = [m for m in ('starlette', 'jinja2', 'uvicorn', 'multipart') if m in sys.modules];"
        "assert not bad, bad; print('clean')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "clean", proc.stderr


def test_w3_cli_web_refuses_a_non_loopback_host_without_a_login(
    database_url: URL, store: Store
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "alkstore_sa.cli", "web", "--host", "0.0.0.0", "--port", "0"],
        env=_env(database_url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "0.0.0.0 is not a loopback address" in lines[0]
    assert "--insecure-no-auth" in lines[0] and "ALKSTORE_WEB_USER" in lines[0]


def test_w3_cli_web_insecure_no_auth_serves_any_host_and_says_so(
    database_url: URL, store: Store
) -> None:
    store.queue("open").enqueue(b"x")
    proc = _popen(database_url, "--host", "0.0.0.0", "--port", "0", "--insecure-no-auth")
    try:
        url = _served(proc)
        local = url.replace("0.0.0.0", "127.0.0.1")
        page = _get(local, Host="dashboard.example")
        assert page.status == 200 and 'data-queue="open"' in page.read().decode()
    finally:
        code, err = _stop(proc)
    assert code == 0 and "WARNING" in err and "no login" in err, err


def test_w3_cli_web_on_loopback_without_a_login_refuses_other_hosts(
    database_url: URL, store: Store
) -> None:
    proc = _popen(database_url, "--host", "127.0.0.2", "--port", "0")
    try:
        url = _served(proc)
        assert _get(url).status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(url, Host="attacker.example:8000")
        assert refused.value.code == 403
    finally:
        code, err = _stop(proc)
    assert code == 0, err
