"""``python -m bench.ab`` runs end to end (tiny sizes) against the test server.

Not a performance test: it proves the A/B tool exports a revision, runs
each side's own bench against one server in alternating rounds, and
reports every case's ratio with its spread and each side's D1 / raw
psycopg ratio from the same run; each case in its own bench run, after a
CHECKPOINT (so a case does not feel what ran before it on that side).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ab

from .. import _pg

TINY = ["--jobs", "120", "--procs", "1", "--e1", "20", "--e2-batches", "2", "--e2-size", "50"]


@pytest.mark.timeout(600)  # two bench runs in subprocesses: minutes on a busy machine
def test_bench_ab_alternates_a_revision_with_the_tree_and_reports_ratios(
    pg_server: _pg.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "ab.json"
    calls: list[str] = []
    real_checkpoint, real_run_side = ab.checkpoint, ab.run_side

    def checkpoint(dsn: str) -> bool:
        calls.append("CHECKPOINT")
        return real_checkpoint(dsn)

    def run_side(src: Path, url: str, cases: str, *rest: object) -> list[dict[str, object]]:
        calls.append(cases)
        return real_run_side(src, url, cases, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(ab, "checkpoint", checkpoint)
    monkeypatch.setattr(ab, "run_side", run_side)
    # One round: the revision's bench, then the tree's (a round alternates them).
    args = ["HEAD", "--cases", "D1,E1", "--rounds", "1", "--json", str(out), "--", *TINY]

    assert ab.main(args) == 0

    doc = json.loads(out.read_text())
    assert len(doc["runs"]["rev"]) == len(doc["runs"]["tree"]) == 1
    assert calls == ["CHECKPOINT", "D1", "CHECKPOINT", "E1"] * 2
    rows = {r["row"]: r for r in doc["rows"]}
    for name in ("E1 alkstore jobs/s", "D1 alkstore n=10 jobs/s", "D1 alkstore n=100 jobs/s"):
        assert len(rows[name]["ratios"]) == 1 and all(x > 0 for x in rows[name]["ratios"])
    assert len(rows["D1 n=10 HEAD / raw psycopg"]["ratios"]) == 1
    assert len(rows["D1 n=10 tree / raw psycopg"]["ratios"]) == 1
    table = capsys.readouterr().out
    assert "tree/HEAD min / median / max" in table


def test_bench_ab_refuses_an_unknown_revision(tmp_path: Path) -> None:
    with pytest.raises(Exception):  # noqa: B017 - git's own error, whatever its class
        ab.export("no-such-revision-anywhere", tmp_path)
