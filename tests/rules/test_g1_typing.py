"""G1: workflows' static types -- ``wf.add(task, **kwargs)`` is checked like ``task.defer``,
and ``defer`` returns a ``WorkflowRun`` on a ``Store``, an awaitable one on an
``AsyncStore``.  ``tests/typing/workflows_ok.py`` must pass ``mypy --strict``;
``workflows_bad.py`` must fail with exactly the errors its ``# E:`` marks."""

from __future__ import annotations

from .test_t1_typing import HERE, _errors, _mypy


def test_g1_typing_correct_uses_pass_mypy_strict() -> None:
    done = _mypy(HERE / "workflows_ok.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_g1_typing_mistakes_fail_mypy_strict_where_marked() -> None:
    path = HERE / "workflows_bad.py"
    expected = {
        (number, code)
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "# E:" in line and not line.lstrip().startswith(('"""', "#"))
        for code in line.split("# E:")[1].split()
    }
    done = _mypy(path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _errors(done.stdout) == expected, done.stdout
