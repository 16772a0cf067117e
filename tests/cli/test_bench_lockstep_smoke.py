"""``python -m bench.lockstep`` runs end to end (tiny sizes) against the test server.

Not a performance test: it proves the tool exports a revision, drives it
and the working tree in turns on one server, and reports each side's
rate, client and server CPU per step, and the ratio, per batch size.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from bench import lockstep

from .. import _pg


@pytest.mark.timeout(600)  # two side processes migrating their databases: slow when busy
def test_bench_lockstep_runs_a_revision_and_the_tree_in_turns(
    pg_server: _pg.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "lockstep.json"
    args = ["HEAD", "--n", "10,100", "--rounds", "1", "--jobs", "300", "--json", str(out)]

    assert lockstep.main(args) == 0

    rows = json.loads(out.read_text())["rows"]
    assert [(r["n"], r["round"]) for r in rows] == [(10, 0), (100, 0)]
    for row in rows:
        assert row["rate"]["rev"] > 0 and row["rate"]["tree"] > 0
        assert row["cpu_ms_per_step"]["tree"] > 0
        assert row["server_cpu_ms_per_step"]["rev"] >= 0  # /proc ticks: 0 on a short run
    printed = capsys.readouterr().out
    assert "D1 lockstep n=10: tree / HEAD median" in printed
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        ours = "SELECT datname FROM pg_database WHERE datname LIKE 'alkstore_lockstep%'"
        assert conn.execute(ours).fetchall() == []  # its databases are dropped
