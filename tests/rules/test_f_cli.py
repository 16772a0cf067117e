"""F1: `alkstore limits` shows and changes a queue's limits; bad input is one line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import Limits, Store
from alkstore_sa.cli import main


def _run(url: URL, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args, "--database-url", url.render_as_string(hide_password=False)])
    out, err = capsys.readouterr()
    return code, out, err


def test_f1_cli_limits_changes_what_it_names_and_keeps_the_rest(
    database_url: URL, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(database_url, capsys, "limits", "cli-q")
    assert code == 0 and out.strip() == "cli-q: no limits (slots in use: 0)"
    assert _run(database_url, capsys, "limits", "cli-q", "--concurrency", "4")[0] == 0
    code, out, _ = _run(database_url, capsys, "limits", "cli-q", "--group-concurrency", "1")
    assert code == 0 and "concurrency=4 group_concurrency=1" in out
    with Store(engine) as store:
        assert store.queue("cli-q").limits() == Limits(concurrency=4, group_concurrency=1)
    code, out, _ = _run(database_url, capsys, "limits", "cli-q", "--json")
    shown: dict[str, Any] = json.loads(out)
    assert shown["concurrency"] == 4 and shown["group_concurrency"] == 1
    assert shown["rate"] is None and shown["slots_in_use"] == 0
    code, out, _ = _run(database_url, capsys, "stats", "cli-q", "--json")
    assert json.loads(out)["cli-q"]["limits"]["concurrency"] == 4
    code, out, _ = _run(database_url, capsys, "limits", "cli-q", "--rate", "100/60")
    assert code == 0 and "rate=100/60s" in out and "concurrency=4" in out
    assert _run(database_url, capsys, "limits", "cli-q", "--clear")[0] == 0
    with Store(engine) as store:
        assert store.queue("cli-q").limits() is None


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "0"],
        ["--concurrency", "x"],
        ["--rate", "10"],
        ["--rate", "10/0"],
        ["--clear", "--concurrency", "2"],
    ],
)
def test_f1_cli_limits_bad_input_is_one_line_and_non_zero(
    database_url: URL, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    try:
        code, _, err = _run(database_url, capsys, "limits", "cli-bad", *args)
    except SystemExit as exc:  # argparse's refusal: usage lines, then one error line
        code, err = exc.code, capsys.readouterr().err
    assert code not in (0, None)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("alkstore")
