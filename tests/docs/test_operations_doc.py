"""docs/operations.md is replayed as written, and every `$ alkstore ...` in the docs parses.

The walk-through's conventions, which this test relies on:

- a ```python block whose first line is ``# NAME.py`` is a file of the story,
  written to the working directory; other ```python blocks are snippets, run
  on their own against a migrated database;
- a ```diff block (``--- NAME`` header, ``-``/``+`` lines) is a fix applied to
  that file where it stands in the page;
- in a ```console block a line ``$ COMMAND`` is run with bash (``export``
  lines are skipped: the test sets the variable), and the lines after it,
  up to the next ``$``, are its output (stdout and stderr as a terminal
  shows them). ``COMMAND &`` starts a background process, ``kill %1``
  stops it (SIGTERM, then waits).

Outputs are compared with times, ages and revision names masked and runs of
blanks collapsed (table columns widen with the values). A read (``alkstore
stats``, ``alkstore jobs``, ``grep``) whose output does not match yet is
retried for a while: the page's reader waits too (for a worker to finish
retrying, for a queue to drain).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import URL

from alkstore_sa import Store
from alkstore_sa.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
DOCS_WITH_COMMANDS = [OPERATIONS, ROOT / "docs" / "cli.md"]

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_READS = ("alkstore stats", "alkstore jobs", "grep ")


@dataclass
class Step:
    kind: str  # "file", "diff", "command" or "snippet"
    text: str
    expected: str = ""


def _steps(doc: Path) -> list[Step]:
    steps: list[Step] = []
    for lang, body in _FENCE.findall(doc.read_text()):
        if lang == "python":
            is_file = re.match(r"# (\w+\.py)\b", body)
            steps.append(Step("file" if is_file else "snippet", body))
        elif lang == "diff":
            steps.append(Step("diff", body))
        elif lang == "console":
            for chunk in re.split(r"^\$ ", body, flags=re.MULTILINE)[1:]:
                command, _, output = chunk.partition("\n")
                steps.append(Step("command", command, output))
    return steps


def _commands(doc: Path) -> list[str]:
    return [s.text for s in _steps(doc) if s.kind == "command"]


# --- every `alkstore` command in the docs parses ---------------------------------------------


def _argv(command: str) -> list[str]:
    """The alkstore arguments of a shell line: up to a pipe, a redirection or a `&`."""
    words = shlex.split(command, comments=True)
    for i, word in enumerate(words):
        if word in ("|", "&", "&&", ";", "<") or re.match(r"\d*>>?", word):
            words = words[:i]
            break
    return words[1:]


def test_operations_doc_commands_all_parse() -> None:
    parser = build_parser()
    seen = 0
    for doc in DOCS_WITH_COMMANDS:
        for command in _commands(doc):
            if not command.startswith("alkstore "):
                continue
            argv = _argv(command)
            if argv[:1] == ["bench"]:  # its arguments are the bench suite's own
                continue
            try:
                args = parser.parse_args(argv)
                check = getattr(args, "check", None)
                if check is not None:
                    check(args)
            except SystemExit as exc:
                pytest.fail(f"{doc.name}: `{command}` does not parse (exit {exc.code})")
            seen += 1
    assert seen >= 30


# --- the walk-through, replayed ---------------------------------------------------------------

_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d"), "<time>"),
    (re.compile(r"\b(\d+(\.\d)?s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh)\b"), "<age>"),
    (re.compile(r"\balkstore_\d{4}\w*"), "<revision>"),
]


def _normal(text: str) -> str:
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines())


class _Session:
    """A working directory and the environment the page's commands run in."""

    def __init__(self, cwd: Path, url: URL) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ALKSTORE_")}
        self.env["ALKSTORE_DATABASE_URL"] = url.render_as_string(hide_password=False)
        # `alkstore` and `python` are this interpreter's, as in the reader's venv.
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env['PATH']}"
        self.background: list[subprocess.Popen[bytes]] = []

    def run(self, command: str) -> str:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
        return proc.stdout

    def start(self, command: str) -> None:
        self.background.append(
            subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
            )
        )

    def stop_last(self) -> None:
        proc = self.background.pop()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "the worker did not stop gracefully"

    def close(self) -> None:
        while self.background:
            proc = self.background.pop()
            proc.kill()
            proc.wait(timeout=30)


def _apply(cwd: Path, diff: str) -> None:
    name = re.search(r"^--- (\S+)", diff, flags=re.MULTILINE)
    assert name is not None, diff
    path = cwd / name.group(1)
    text = path.read_text()
    removed = [line[1:] for line in diff.splitlines() if re.match(r"-(?!--)", line)]
    added = [line[1:] for line in diff.splitlines() if re.match(r"\+(?!\+\+)", line)]
    old, new = "\n".join(removed) + "\n", "\n".join(added) + "\n"
    assert text.count(old) == 1, f"the diff's lines are not in {path.name} once"
    path.write_text(text.replace(old, new))


@pytest.fixture
def session(tmp_path: Path, blank_database: URL) -> Iterator[_Session]:
    s = _Session(tmp_path, blank_database)
    try:
        yield s
    finally:
        s.close()


def test_operations_doc_walk_through_runs_as_written(session: _Session) -> None:
    steps = _steps(OPERATIONS)
    assert sum(s.kind == "command" for s in steps) >= 20
    for step in steps:
        if step.kind == "file":
            name = re.match(r"# (\w+\.py)", step.text)
            assert name is not None
            (session.cwd / name.group(1)).write_text(step.text)
        elif step.kind == "diff":
            _apply(session.cwd, step.text)
        elif step.kind == "command":
            command = step.text
            if command.startswith("export "):
                continue
            if command.endswith("&"):
                session.start(command[:-1].strip())
                continue
            if command == "kill %1":
                session.stop_last()
                continue
            expected = _normal(step.expected)
            deadline = time.monotonic() + (60 if command.startswith(_READS) else 0)
            while True:
                got = _normal(session.run(command))
                if got == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert got == expected, f"`{command}` printed:\n{got}\n\nthe page says:\n{expected}"


def test_operations_doc_python_snippets_run(
    database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", database_url.render_as_string(hide_password=False))
    with Store.from_url(database_url) as store:  # a bad day's worth of dead letters
        q = store.queue("emails")
        q.enqueue_many([b"{}"] * 5)
        for handle in q.claim_batch("w", 5):
            assert handle.fail("no 'to' address in []")
    snippets = [s.text for s in _steps(OPERATIONS) if s.kind == "snippet"]
    assert len(snippets) >= 2
    for i, snippet in enumerate(snippets):
        exec(compile(snippet, f"operations.md[snippet {i}]", "exec"), {"__name__": "__doc__"})
    with Store.from_url(database_url) as store:
        stats = store.queue("emails").stats()
        assert (stats.due, stats.dead, stats.paused) == (5, 0, False)
