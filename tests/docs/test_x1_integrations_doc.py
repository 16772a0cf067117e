"""X1: the systemd, Docker and Kubernetes snippets of docs/integrations.md run workers
with `--processes`, and their command lines are ones the CLI accepts and runs.

Each command line is read out of the doc, parsed by the CLI's own parser
(and its checks), then run for real against the test database -- its
target swapped for the test app, its port for a free one -- until every
child answers on /healthz; SIGTERM then stops it with exit 0."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa.cli import build_parser

from .._workers import wait_for
from ..worker._x1 import Supervised, make_table
from ..worker.test_b5_health_port import _get

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def command_lines() -> dict[str, list[str]]:
    """Each snippet's `alkstore ...` argv, without the program name."""
    found: dict[str, list[str]] = {}
    for block in _blocks("ini"):
        for line in block.splitlines():
            if line.startswith("ExecStart="):
                argv = shlex.split(line.removeprefix("ExecStart="))
                found["systemd"] = argv[1:]
    for block in _blocks("dockerfile"):
        if m := re.search(r"^CMD (\[.*\])$", block, flags=re.M):
            found["docker"] = json.loads(m[1])[1:]
    for block in _blocks("yaml"):
        if m := re.search(r"command: (\[.*?\])", block, flags=re.S):
            found["kubernetes"] = json.loads(m[1])[1:]
    return found


def test_x1_every_snippet_runs_processes_and_parses() -> None:
    lines = command_lines()
    assert set(lines) == {"systemd", "docker", "kubernetes"}
    parser = build_parser()
    for where, argv in lines.items():
        args = parser.parse_args(argv)
        args.check(args)  # what argparse cannot say itself
        assert (args.command, args.processes, args.health_port) == ("worker", 2, 8080), where
        assert args.target == "myapp.worker:worker", where


@pytest.mark.chaos
@pytest.mark.parametrize("where", ["systemd", "docker"])  # kubernetes': docker's argv
def test_x1_snippet_command_line_runs_every_child(
    where: str, database_url: URL, engine: Engine
) -> None:
    make_table(engine)
    argv = command_lines()[where]
    if where == "docker":
        assert command_lines()["kubernetes"] == argv
    argv = ["tests.worker._x1_app:make_worker" if a == "myapp.worker:worker" else a for a in argv]
    argv[argv.index("--health-port") + 1] = "0"
    sup = Supervised([sys.executable, "-m", "alkstore_sa.cli", *argv], database_url)
    try:
        url = sup.served("worker health")
        wait_for(lambda: _get(url)[0] == 200, timeout=60, every=0.1)
        doc = json.loads(_get(url)[2])
        assert doc["processes"] == 2 and len({c["pid"] for c in doc["children"]}) == 2
        code, _ = sup.stop()
    finally:
        sup.close()
    assert code == 0, sup.text()
