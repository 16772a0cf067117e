"""T1: the static types -- ``mypy --strict`` checks deferred arguments and the faces.

``tests/typing/tasks_ok.py`` must pass; ``tests/typing/tasks_bad.py`` must
fail with exactly the errors its ``# E: code`` comments mark, line by line.
The venv's own mypy runs them (the one `mypy --strict alkstore_sa` uses).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "typing"
ROOT = HERE.parent.parent
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")

pytest.importorskip("mypy", reason="mypy is a dev dependency")


def _mypy(path: Path) -> subprocess.CompletedProcess[str]:
    # Incremental, in the checkout's own .mypy_cache: `mypy --strict alkstore_sa`
    # (CI runs it first) has analysed SQLAlchemy and the package already, so
    # each check reads those from the cache instead of a minute of analysis.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def _errors(output: str) -> set[tuple[int, str]]:
    return {
        (int(m["line"]), m["code"]) for m in map(ERROR.match, output.splitlines()) if m is not None
    }


def test_t1_typing_correct_uses_pass_mypy_strict() -> None:
    done = _mypy(HERE / "tasks_ok.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_t1_typing_mistakes_fail_mypy_strict_where_marked() -> None:
    path = HERE / "tasks_bad.py"
    expected = {  # "# E: code [code...]": each error mypy must report on that line
        (number, code)
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "# E:" in line and not line.lstrip().startswith(('"""', "#"))
        for code in line.split("# E:")[1].split()
    }
    assert len(expected) >= 6
    done = _mypy(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _errors(done.stdout) == expected, done.stdout
