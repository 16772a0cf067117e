"""O5-O6: a queue's stats in one snapshot; the store's queue names and their stats."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Engine, Executable, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, EnqueueOpts, QueueStats, Store
from alkstore_sa._db.sql import stats as stats_sql
from alkstore_sa._db.sql._render import rendered

from .._qtools import expire, lapse, sql
from .._sqlspy import SqlSpy, sync_engine_of


def _dead(q: Any, *payloads: bytes) -> list[int]:
    ids = []
    for payload in payloads:
        ids.append(q.enqueue(payload))
        assert q.claim_one("w").fail("x") is True
    return ids


def _without_age(stats: QueueStats) -> QueueStats:
    return dataclasses.replace(stats, oldest_due_age=0.0)


# -- O5 --------------------------------------------------------------------------


def test_o5_stats_counts_each_kind_of_row(qs: Any, engine: Engine) -> None:
    q = qs.queue("o5")
    other = qs.queue("o5-other")
    _dead(q, b"d1", b"d2")
    lapsed, expired_held, held = q.enqueue_many([b"p1", b"p2", b"p3"])
    assert len(q.claim_batch("w", 3)) == 3
    lapse(engine, lapsed)
    expire(engine, expired_held)  # processing and expired: counted in both
    old_due, due = q.enqueue_many([b"due1", b"due2"])
    sql(
        engine,
        "UPDATE alkstore.jobs SET run_at = clock_timestamp() - interval '100 s' WHERE id = :id",
        id=old_due,
    )
    q.enqueue(b"later", EnqueueOpts(delay=3600))
    expired_pending = q.enqueue(b"expired")
    expired_later = q.enqueue(b"expired later", EnqueueOpts(delay=3600))
    expire(engine, expired_pending, expired_later)  # neither due nor scheduled
    # Another queue's rows of every kind change nothing.
    other.enqueue_many([b"o"] * 3)
    other.claim_one("w")
    _dead(other, b"od")
    other.pause()

    stats = q.stats()
    assert stats == QueueStats(
        queue="o5",
        due=2,
        scheduled=1,
        processing=3,
        lapsed=1,
        expired=3,
        dead=2,
        oldest_due_age=stats.oldest_due_age,
        paused=False,
    )
    assert 100 <= stats.oldest_due_age < 160
    assert isinstance(stats.oldest_due_age, float)
    q.pause()
    assert q.stats().paused is True
    assert held and due  # (named for the reader)


def test_o5_an_empty_queue_reads_zero(qs: Any) -> None:
    assert qs.queue("o5-empty").stats() == QueueStats("o5-empty", 0, 0, 0, 0, 0, 0, 0.0, False)


def test_o5_oldest_due_age_is_zero_without_due_rows(qs: Any) -> None:
    q = qs.queue("o5")
    q.enqueue(b"later", EnqueueOpts(delay=60))
    q.enqueue(b"held")
    q.claim_batch("w", 5)
    stats = q.stats()
    assert (stats.due, stats.scheduled, stats.processing, stats.oldest_due_age) == (0, 1, 1, 0.0)


def test_o5_stats_is_one_statement(qs: Any) -> None:
    q = qs.queue("o5")
    q.enqueue(b"x")
    spy = SqlSpy(sync_engine_of(qs))
    try:
        q.stats()
        assert spy.count == 1
        qs.stats()
        assert spy.count == 2
    finally:
        spy.close()


def _plan_nodes(engine: Engine, stmt: Executable, params: dict[str, Any]) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        text = rendered(stmt, conn.dialect, "alkstore")
        assert text is not None
        [[plan]] = conn.exec_driver_sql(
            "EXPLAIN (FORMAT JSON) " + text.sql, text.params(params)
        ).all()
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return nodes


@pytest.fixture
def big_neighbour(engine: Engine) -> None:
    """A queue of 40,000 pending, 10,000 processing and 20,000 dead rows, analysed."""
    sql(
        engine,
        "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout,"
        " status, worker_id, claim_deadline, deadline_floor)"
        " SELECT 'big', '\\x00', statement_timestamp(), 5, interval '30 s',"
        " CASE WHEN g % 5 = 0 THEN 'processing' ELSE 'pending' END,"
        " CASE WHEN g % 5 = 0 THEN 'w' END,"
        " CASE WHEN g % 5 = 0 THEN statement_timestamp() + interval '30 s' END,"
        " CASE WHEN g % 5 = 0 THEN statement_timestamp() + interval '30 s' END"
        " FROM generate_series(1, 50000) AS g",
    )
    sql(
        engine,
        "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
        " max_attempts, visibility_timeout, created_at, last_error, died_at)"
        " SELECT 10000000 + g, 'big', '\\x00', 0, statement_timestamp(), 5, 5,"
        " interval '30 s', statement_timestamp(), 'x', statement_timestamp()"
        " FROM generate_series(1, 20000) AS g",
    )
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE alkstore.jobs, alkstore.dead_jobs"
        )


def test_o5_a_small_queues_stats_read_only_its_own_rows(
    qs: Any, engine: Engine, big_neighbour: None
) -> None:
    """Beside a big queue, the small one's stats walk indexes by its name: no table scan."""
    q = qs.queue("small")
    q.enqueue_many([b"a", b"b"])
    q.claim_one("w")
    _dead(q, b"d")
    nodes = _plan_nodes(engine, stats_sql.stats(), {"p_queue": "small"})
    scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    assert not [s for s in scans if s[0] == "Seq Scan"], scans
    used = {s[2] for s in scans if s[2]}
    assert {"jobs_claim_ix", "jobs_lapse_ix", "dead_jobs_queue_died_at_ix"} <= used, scans
    stats = q.stats()
    assert (stats.due, stats.processing, stats.dead) == (1, 1, 1)
    big = qs.queue("big").stats()
    assert (big.due, big.processing, big.dead) == (40_000, 10_000, 20_000)


def test_o6_queue_names_skip_through_the_indexes(engine: Engine, big_neighbour: None) -> None:
    """One index descent per queue name, never a read of every row."""
    nodes = _plan_nodes(engine, stats_sql.queue_names(), {})
    scans = [(n["Node Type"], n.get("Relation Name")) for n in nodes]
    assert not [s for s in scans if s[0] == "Seq Scan" and s[1] != "paused_queues"], scans


# -- O6 --------------------------------------------------------------------------


def test_o6_queue_names_are_every_queue_with_a_row_or_a_pause_sorted(qs: Any) -> None:
    qs.queue("b-pending").enqueue(b"x")
    held = qs.queue("a-processing")
    held.enqueue(b"x")
    held.claim_one("w")
    _dead(qs.queue("c-dead"), b"x")
    qs.queue("z-paused").pause()
    gone = qs.queue("gone")
    gone.enqueue(b"x")
    gone.claim_one("w").ack()
    resumed = qs.queue("resumed")
    resumed.pause()
    resumed.resume()
    for name in ("Zed", "émile", "Émile", "ü"):
        qs.queue(name).enqueue(b"x")
    names = qs.queue_names()
    expected = ["b-pending", "a-processing", "c-dead", "z-paused", "Zed", "émile", "Émile", "ü"]
    assert names == sorted(expected)  # Python's order, whatever the collation
    assert names[:2] == ["Zed", "a-processing"]


def test_o6_an_empty_store_has_no_queues(qs: Any) -> None:
    assert qs.queue_names() == []
    assert qs.stats() == {}


def test_o6_store_stats_maps_each_queue_to_its_stats(qs: Any, engine: Engine) -> None:
    a, b, c = qs.queue("a"), qs.queue("b"), qs.queue("c")
    a.enqueue_many([b"1", b"2", b"3"])
    a.claim_one("w")
    b.enqueue(b"later", EnqueueOpts(delay=timedelta(hours=1)))
    _dead(b, b"d")
    c.pause()
    everything = qs.stats()
    assert list(everything) == qs.queue_names() == ["a", "b", "c"]
    for q in (a, b, c):
        assert _without_age(everything[q.name]) == _without_age(q.stats())
    assert everything["a"].oldest_due_age >= 0.0
    assert everything["c"] == QueueStats("c", 0, 0, 0, 0, 0, 0, 0.0, True)


_PREPARED = "SELECT statement FROM pg_prepared_statements"


def test_o5_stats_are_planned_for_their_queue_every_time(database_url: URL) -> None:
    """psycopg prepares a statement after five runs, and PostgreSQL may then keep one
    generic plan, which cannot use the partial indexes: the operations' reads are never
    prepared, the claim still is."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with Store(engine) as store:
            q = store.queue("o5")
            q.enqueue_many([b"x"] * 3)
            for _ in range(8):
                q.stats()
                store.stats()
                store.queue_names()
                q.jobs()
                q.claim_batch("w", 1)
            with engine.connect() as conn:
                prepared = [r[0] for r in conn.execute(text(_PREPARED))]
    finally:
        engine.dispose()
    assert any("UPDATE alkstore.jobs SET status" in s for s in prepared)  # the claim
    assert not [s for s in prepared if "pg_notify" not in s and "count(*)" in s]
    assert not [s for s in prepared if "paused_queues" in s and "UPDATE" not in s]


async def test_o5_async_stats_are_planned_for_their_queue_every_time(database_url: URL) -> None:
    engine = create_async_engine(database_url, pool_size=1, max_overflow=0)
    try:
        store = AsyncStore(engine)
        q = store.queue("o5")
        await q.enqueue(b"x")
        for _ in range(8):
            await q.stats()
            await store.stats()
            await q.claim_batch("w", 1)
        async with engine.connect() as conn:
            prepared = [r[0] for r in await conn.execute(text(_PREPARED))]
            threshold = (await conn.get_raw_connection()).driver_connection.prepare_threshold
    finally:
        await engine.dispose()
    assert threshold == 5  # restored after each read
    assert any("UPDATE alkstore.jobs SET status" in s for s in prepared)
    assert not [s for s in prepared if "paused_queues" in s and "UPDATE" not in s]


def test_o5_bench_case_st_runs_and_stays_out_of_the_default_run(
    pg_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m bench --only ST`` measures stats() beside a big queue (tiny sizes here)."""
    from bench import cli

    assert "ST" in cli.CASES and "ST" not in cli.DEFAULT_CASES
    url = pg_server.url(pg_server.maintenance_db).render_as_string(hide_password=False)
    monkeypatch.setenv("ALKSTORE_DATABASE_URL", url)
    out = tmp_path / "st.json"
    argv = ["--only", "ST", "--st-live", "2000", "--st-dead", "200", "--json", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    shapes = {f["shape"] for f in doc["figures"] if f["case"] == "ST"}
    assert "q.stats(), small queue beside it" in shapes and len(shapes) == 4
    assert all(f["extra"]["p50_ms"] > 0 for f in doc["figures"])
    assert "ST small queue stats() p50" in {t["name"] for t in doc["targets"]}
    assert "ST small queue stats() p50" in capsys.readouterr().out
