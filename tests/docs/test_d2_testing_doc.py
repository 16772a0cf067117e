"""D2: docs/testing.md's pytest fixture recipe runs as written.

The blocks marked ``<!-- file: NAME -->`` are written out as those files in
an empty directory and run by a pytest of their own (as a user would run
them): the recipe starts its own embedded PostgreSQL, builds the template,
and the example test must pass.  Like tests/docs/test_readme.py for the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _files() -> dict[str, str]:
    found = re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    return dict(found)


def test_d2_testing_doc_has_the_recipe_and_an_example() -> None:
    files = _files()
    assert set(files) == {"conftest.py", "test_emails.py"}
    assert "template_dbname" in files["conftest.py"]
    assert "run_due" in files["test_emails.py"]


def test_d2_testing_doc_recipe_runs_as_written(tmp_path: Path) -> None:
    for name, code in _files().items():
        (tmp_path / name).write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ALKSTORE_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout, proc.stdout[-2000:]
