"""The benchmark suite runs end to end (tiny sizes) against the test server.

Not a performance test: it proves ``python -m bench`` measures every case,
checks each drain ran every job exactly once (the suite raises otherwise),
and writes the table and JSON the docs describe.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bench import cli

from .. import _pg


def test_bench_suite_runs_every_case_and_writes_json(
    pg_server: _pg.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The suite makes (and drops) its own database on the test server.
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "bench.json"
    sizes = ["--e1", "20", "--e2-batches", "2", "--e2-size", "50", "--jobs", "120"]
    sizes += ["--procs", "1", "--l1", "5", "--backlog", "300", "--dead", "30"]

    assert cli.main([*sizes, "--json", str(out)]) == 0

    doc = json.loads(out.read_text())
    ran = {(f["case"], f["system"]) for f in doc["figures"]}
    for case in ("E1", "E2", "D1", "S1"):
        assert (case, "alkstore") in ran
        assert (case, "raw-psycopg") in ran
    assert ("D2", "alkstore") in ran
    assert ("L1", "alkstore") in ran
    assert ("D2", "alkstore-c50") in ran  # pgqueuer's 50 jobs in flight: the D2 target
    for case in ("E1", "D1", "D2", "L1"):  # D1: the async face on both drivers
        assert (case, "alkstore-async") in ran and (case, "alkstore-asyncpg") in ran
    assert "D1 n=10 AsyncStore asyncpg/psycopg (rate)" in doc["references"]
    assert "D2 Worker c=10 vs pgqueuer-asyncpg (it holds 50 jobs)" in doc["references"]
    assert all(f["jobs"] > 0 and f["seconds"] > 0 for f in doc["figures"])
    names = {t["name"] for t in doc["targets"]}
    assert {"D1 n=10 vs raw", "E1 vs raw insert+notify", "S1 n=100 vs D1 n=100"} <= names
    assert "D2 Worker c=50 vs pgqueuer-asyncpg" in names  # like for like
    assert doc["meta"]["postgres"]["server_version"]
    table = capsys.readouterr().out
    assert "D1 n=100 vs raw" in table


def test_b4_bench_ab_runs_plain_and_instrumented_drains(
    pg_server: _pg.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # B4's cost measurement: interleaved plain/instrumented drains, each round's ratio
    # reported (the instrumented drains also check every job was counted as acked).
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "b4.json"
    args = ["--only", "B4", "--b4-rounds", "2", "--jobs", "60", "--no-pgqueuer"]
    assert cli.main([*args, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    ran = [(f["system"], f["shape"]) for f in doc["figures"]]
    for shape in ("Worker c=10", "AsyncWorker c=10"):
        assert ran.count(("alkstore", shape)) == ran.count(("alkstore+prometheus", shape)) == 2
        assert any(k.startswith(f"B4 {shape} CPU/job +prom/plain") for k in doc["references"])
        assert any(
            k.startswith(f"B4 {shape} rate +prom/plain, median of 2") for k in doc["references"]
        )


def test_bench_scale_cases_s2_s3_s4_report_their_targets(
    pg_server: _pg.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "scale.json"
    sizes = ["--jobs", "120", "--procs", "2", "--s2-future", "500", "--s3-expired", "200"]
    sizes += ["--s4-jobs", "400"]

    assert cli.main(["--only", "S2,S3,S4", *sizes, "--no-pgqueuer", "--json", str(out)]) == 0

    doc = json.loads(out.read_text())
    ran = {f["case"] for f in doc["figures"]}
    assert {"D1", "S2", "S3", "S4"} <= ran  # D1 n=10 comes along as their baseline
    targets = {t["name"]: t for t in doc["targets"]}
    for name in ("S2 vs D1 n=10", "S3 vs D1 n=10", "S4 claim p99 end / start"):
        assert targets[name]["value"] is not None
    s4 = next(f for f in doc["figures"] if f["case"] == "S4")
    assert s4["jobs"] == 400
    for key in ("p99_start_ms", "p99_end_ms", "claim_ix_buffers_end", "lapse_ix_buffers_end"):
        assert key in s4["extra"]


@pytest.mark.timeout(300)  # seven drains, each starting its worker processes
def test_x1_bench_processes_and_cpu_bound_run_and_report_their_targets(
    pg_server: _pg.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--only processes,cpu-bound`: the names for XP and XC.
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    monkeypatch.setattr("bench._processes.CPU_JOBS", 40)
    out = tmp_path / "bench.json"
    argv = ["--only", "processes,cpu-bound", "--jobs", "200", "--json", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    ran = {(f["case"], f["system"]): f for f in doc["figures"]}
    for case, jobs in (("XP", 200), ("XC", 40)):
        for n in (1, 2):
            assert ran[(case, f"alkstore-p{n}")]["jobs"] == jobs
    for system in ("alkstore-p1-sleep", "alkstore-p2-sleep"):  # D3's shape by processes
        assert ran[("XP", system)]["jobs"] == 200
    assert ran[("XC", "alkstore-pool2")]["jobs"] == 40  # X2: a 2-process handler_executor
    names = {t["name"] for t in doc["targets"] if t["value"] is not None}
    assert {
        "XP 2 processes vs 1",
        "XC cpu-bound 2 processes vs 1",
        "XC cpu-bound handler_executor (2 processes) vs 1 process",
        "XP 1 ms blocking handlers vs no-op, 2 process(es)",
    } <= names
    if importlib.util.find_spec("pgqueuer") is not None:  # the bench extra's baseline
        assert ("D2", "pgqueuer-asyncpg") in ran
        assert "XP 2 processes vs pgqueuer-asyncpg" in names


def test_bench_results_reports_the_kept_drain_against_d1_and_wait_latency(
    pg_server: _pg.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--only results` (RS): D1 with every job kept beside D1, then wait() round trips.
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    monkeypatch.setattr("bench._results.WAIT_ROUNDS", 20)
    out = tmp_path / "bench.json"
    assert cli.main(["--only", "results", "--jobs", "200", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    kept, waits = (f for f in doc["figures"] if f["case"] == "RS")
    assert kept["jobs"] == 200 and "every job kept" in kept["shape"]
    assert waits["jobs"] == 20 and 0 < waits["extra"]["p50_ms"] <= waits["extra"]["p99_ms"]
    [ratio] = [t for t in doc["targets"] if t["name"] == "RS every job kept vs D1"]
    assert ratio["value"] is not None and ratio["value"] > 0


def test_bench_workflow_cases_ww_wd_report_their_targets(
    pg_server: _pg.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # G1-G4's cases by the issue's names: claims beside waiting steps, and a
    # fan-out/fan-in drained by a Worker beside D2 on as many plain jobs (alternated).
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "wf.json"
    args = ["--only", "workflow-waiting,workflow-drain", "--quick", "--no-pgqueuer"]
    args += ["--wf-waiting", "300", "--wf-claims", "40", "--wf-steps", "60", "--wf-rounds", "2"]
    assert cli.main([*args, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    shapes = [(f["case"], f["system"], f["shape"]) for f in doc["figures"]]
    assert ("WW", "alkstore", "claim beside waiting steps") in shapes
    beside = next(f for f in doc["figures"] if f["shape"] == "claim beside waiting steps")
    assert beside["extra"]["waiting_steps"] == 300 and beside["jobs"] == 40
    assert [s[1] for s in shapes if s[0] == "WD"] == [
        "alkstore-workflow",
        "alkstore-plain",
        "alkstore-plain",
        "alkstore-workflow",
    ]
    targets = {t["name"]: t for t in doc["targets"]}
    for name in ("WW claim p50 beside waiting", "WD fan-out/fan-in vs D2"):
        assert targets[name]["value"] is not None and targets[name]["value"] > 0


def test_f_bench_flow_cases_run_and_report_their_targets(
    pg_server: _pg.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--only flow-queue,flow-groups,flow-rate` (FQ, FG, FR and the slot-freed wake FW)
    # at --quick sizes, the drains and the rated run cut shorter still.
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "bench.json"
    argv = ["--only", "flow-queue,flow-groups,flow-rate", "--quick", "--jobs", "500"]
    argv += ["--fg-blocked", "20000", "--fg-samples", "20", "--fg-drain", "1000"]
    argv += ["--fr-seconds", "2", "--fw-rounds", "5", "--no-pgqueuer", "--json", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    cases = [f["case"] for f in doc["figures"]]
    assert cases.count("FQ") == 2 and cases.count("FG") == 9
    assert cases.count("FR") == 1 and cases.count("FW") == 1
    measured = {t["name"]: t["value"] for t in doc["targets"] if t["value"] is not None}
    for name in (
        "FQ concurrency=50 vs D1",
        "FG claim p50 beside blocked groups, after parking",
        "FG claim p50 beside blocked groups, after VACUUM",
        "FG claim p50 beside blocked groups, enqueued into full groups",
        "FG drain group_concurrency=1 vs D1",
        "FR achieved / configured rate",
        "FW slot-freed wake p99",
    ):
        assert measured[name] > 0, name
    [burst] = (f for f in doc["figures"] if "blocked in" in f["shape"] and "enqueued" in f["shape"])
    assert burst["extra"]["parked_at_enqueue"] == 20000  # F3: the burst never entered the range
    [fr] = (f for f in doc["figures"] if f["case"] == "FR")
    assert 0 < fr["extra"]["achieved_per_s"] <= 1.05 * fr["extra"]["configured_per_s"]
