"""Migration 0009: rows the library cannot load are repaired or dead-lettered, then refused.

Each offending row of issue 24 is written as a foreign producer (or the app
role) could before 0009; the upgrade repairs what keeps its meaning,
dead-letters what does not, and adds the CHECK constraints; afterwards the
same values are refused on INSERT and the queue's good jobs are claimed and
decoded on their first attempt.  The way down drops the constraints only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import URL, create_engine, text
from sqlalchemy.exc import IntegrityError

from alkstore_sa import Store
from alkstore_sa._values.job import LIVE_COLUMNS
from alkstore_sa.migrations._config import alembic_config
from alkstore_sa.schema import dead_jobs, jobs

from .test_migrations import connect

BEFORE = "alkstore_0008_parked_expired"
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)

# (what, the columns' SQL values) -- each row one variant of the issue.
POISON = {
    "run_at -infinity": "run_at => '-infinity', max_attempts => 2147483647",
    "run_at +infinity": "run_at => 'infinity'",
    "expires_at infinity": "expires_at => 'infinity'",
    "expires_at -infinity": "expires_at => '-infinity'",
    "created_at infinity": "created_at => 'infinity'",
    "huge visibility_timeout": "visibility_timeout => '100000000 years'",
    "errors an object": "errors => '{\"a\": 1}'",
    "no attempt left": "attempts => 3, max_attempts => 3",
    "attempts past max": "attempts => 2147483647, max_attempts => 2",
}


def _insert_sql(assignments: str) -> str:
    values = {
        "queue": "'q1'",
        "payload": "'\\x00'",
        "run_at": "statement_timestamp()",
        "max_attempts": "2",
        "visibility_timeout": "'2 seconds'",
    }
    for part in assignments.split(", ") if assignments else []:
        column, value = part.split(" => ")
        values[column] = value
    return (
        f"INSERT INTO alkstore.jobs ({', '.join(values)}) VALUES ({', '.join(values.values())})"
        " RETURNING id"
    )


def _every_job(url: URL) -> dict[str, list[dict[str, Any]]]:
    """Every row of both tables but the columns later revisions added (keep_completed,
    grp, workflow_id: not there at 0008, and the rows are compared across them)."""
    found = {}
    with connect(url) as conn:
        for table in (jobs, dead_jobs):
            columns = ", ".join(
                c.name for c in table.c if c.name not in ("keep_completed", "grp", "workflow_id")
            )
            rows = conn.execute(text(f"SELECT {columns} FROM alkstore.{table.name} ORDER BY id"))
            found[table.name] = [dict(r) for r in rows.mappings()]
    return found


# The live columns revision 0008 has (keep_completed came with 0011, R1; grp
# with 0012, F3; workflow_id with 0013, G1).
_COLUMNS_0008 = [c for c in LIVE_COLUMNS if c not in ("keep_completed", "grp", "workflow_id")]


def _rows(url: URL, ids: list[int]) -> list[dict[str, object]]:
    with connect(url) as conn:
        found = conn.execute(
            text(
                f"SELECT {', '.join(_COLUMNS_0008)} FROM alkstore.jobs"
                " WHERE id = ANY(:ids) ORDER BY id"
            ),
            {"ids": ids},
        )
        return [dict(r) for r in found.mappings()]


def test_m1_row_checks_repair_or_dead_letter_poison_rows_then_refuse_them(
    blank_database: URL,
) -> None:
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    ids: dict[str, int] = {}
    with connect(blank_database) as conn:
        for what, values in POISON.items():
            ids[what] = conn.execute(text(_insert_sql(values))).scalar_one()
        good = [conn.execute(text(_insert_sql(""))).scalar_one() for _ in range(6)]
        # A dead letter a requeue could not copy back, and one it could not load.
        conn.execute(
            text(
                "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
                " max_attempts, visibility_timeout, created_at, died_at, errors)"
                " VALUES (-1, 'q1', '\\x00', 0, 'infinity', 1, 0, '-1 s', '-infinity',"
                " 'infinity', '\"x\"')"
            )
        )
        conn.commit()
    before_good = _rows(blank_database, good)

    command.upgrade(cfg, "head")

    after = _every_job(blank_database)
    live = {r["id"]: r for r in after["jobs"]}
    dead = {r["id"]: r for r in after["dead_jobs"]}
    assert _rows(blank_database, good) == before_good  # good rows untouched
    assert live[ids["run_at -infinity"]]["run_at"] == EARLIEST
    assert live[ids["run_at +infinity"]]["run_at"] == LATEST
    assert live[ids["expires_at infinity"]]["expires_at"] is None  # "never"
    assert live[ids["expires_at -infinity"]]["expires_at"] == EARLIEST  # expired: swept
    assert live[ids["created_at infinity"]]["created_at"] == LATEST
    assert live[ids["huge visibility_timeout"]]["visibility_timeout"] == timedelta(seconds=10**9)
    assert live[ids["errors an object"]]["errors"] is None
    for what in ("no attempt left", "attempts past max"):
        assert ids[what] not in live
        assert "attempts out of range" in dead[ids[what]]["last_error"]
    repaired = dead[-1]
    assert repaired["run_at"] == LATEST and repaired["created_at"] == EARLIEST
    assert repaired["max_attempts"] == 1 and repaired["errors"] is None
    assert repaired["visibility_timeout"] == timedelta(seconds=1)

    # Every value is refused now, as the app role's INSERT would be.
    with connect(blank_database) as conn:
        for values in POISON.values():
            with pytest.raises(IntegrityError, match="violates check constraint"):
                conn.execute(text(_insert_sql(values)))
            conn.rollback()

    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("q1")
            claimed = q.claim_batch("w", 50)
            assert set(good) <= {h.job.id for h in claimed}
            assert all(h.job.attempts == 1 for h in claimed)
            for h in claimed:
                h.ack()
            assert q.requeue_dead() == 3
    finally:
        eng.dispose()

    # Down: the constraints go (an infinite run_at goes in again), the rows stay.
    kept = _every_job(blank_database)
    command.downgrade(cfg, BEFORE)
    assert _every_job(blank_database) == kept
    with connect(blank_database) as conn:
        again = conn.execute(text(_insert_sql(POISON["run_at -infinity"]))).scalar_one()
        conn.commit()
    command.upgrade(cfg, "head")
    with connect(blank_database) as conn:
        run_at = conn.execute(
            text("SELECT run_at FROM alkstore.jobs WHERE id = :i"), {"i": again}
        ).scalar_one()
    assert run_at == EARLIEST


NFD = "cafe\u0301"
NFC = "caf\u00e9"


def test_m1_q2_non_nfc_queue_still_drains_after_the_upgrade(blank_database: URL) -> None:
    """Queue names are NFC now; 0009 moves a queue spelled otherwise to its NFC name."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, BEFORE)
    insert = text(
        "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, visibility_timeout,"
        " unique_key) VALUES (:q, :p, statement_timestamp(), 3, '30 s', :k) RETURNING id"
    )
    with connect(blank_database) as conn:
        old = [conn.execute(insert, {"q": NFD, "p": b"old", "k": None}).scalar_one()]
        old.append(conn.execute(insert, {"q": NFD, "p": b"old-keyed", "k": "k2"}).scalar_one())
        kept = conn.execute(insert, {"q": NFC, "p": b"nfc-keyed", "k": "k1"}).scalar_one()
        clash = conn.execute(insert, {"q": NFD, "p": b"dup", "k": "k1"}).scalar_one()
        conn.execute(text("INSERT INTO alkstore.paused_queues (queue) VALUES (:q)"), {"q": NFD})
        conn.commit()
    command.upgrade(cfg, "head")
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            assert store.queue(NFD).name == NFC  # one queue, however it is typed
            assert store.queue_names() == [NFC]
            q = store.queue(NFD)
            assert q.stats().paused is True  # the pause moved with it
            q.resume()
            handles = q.claim_batch("w", 10)
            assert sorted(h.job.id for h in handles) == sorted([*old, kept])
            assert all(h.job.queue == NFC and h.job.attempts == 1 for h in handles)
            dead = store.queue(NFC).get_job(clash)
            assert dead is not None and dead.status == "dead" and "NFC" in (dead.last_error or "")
            # A new enqueue under either spelling lands in the same queue.
            new = store.queue(NFD).enqueue(b"new")
            got = store.queue(NFC).claim_one("w")
            assert got is not None and got.id == new
    finally:
        eng.dispose()
