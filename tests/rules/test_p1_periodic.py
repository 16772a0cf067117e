"""P1: periodic jobs -- slot arithmetic, one job per (name, slot), missed slots, workers, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import URL, Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine

from alkstore_sa import AsyncStore, AsyncWorker, Periodic, Store, Tasks, Worker
from alkstore_sa.tasks import decode_envelope

from .._workers import KINDS, start_worker, wait_for

NY = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


# --- slot arithmetic (no database) ------------------------------------------------------


@pytest.fixture
def q(store: Store) -> Any:
    return store.queue("ticks")


def test_p1_next_after_is_strictly_after(q: Any) -> None:
    p = Periodic("every-5", "*/5 * * * *", q)
    assert p.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 5)
    assert p.next_after(utc(2026, 1, 1, 10, 0, 0) - timedelta(microseconds=1)) == utc(
        2026, 1, 1, 10, 0
    )
    assert p.next_after(utc(2026, 1, 1, 10, 4, 59)) == utc(2026, 1, 1, 10, 5)
    assert p.last_at_or_before(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 0)
    assert p.last_at_or_before(utc(2026, 1, 1, 10, 4, 59, 999999)) == utc(2026, 1, 1, 10, 0)


@pytest.mark.parametrize(
    ("alias", "after", "expected"),
    [
        ("@hourly", utc(2026, 1, 1, 10, 30), utc(2026, 1, 1, 11)),
        ("@daily", utc(2026, 1, 1, 10, 30), utc(2026, 1, 2)),
        ("@midnight", utc(2026, 1, 1, 10, 30), utc(2026, 1, 2)),
        ("@weekly", utc(2026, 1, 1), utc(2026, 1, 4)),  # 2026-01-04 is a Sunday
        ("@monthly", utc(2026, 1, 15), utc(2026, 2, 1)),
        ("@yearly", utc(2026, 1, 15), utc(2027, 1, 1)),
        ("@annually", utc(2026, 1, 15), utc(2027, 1, 1)),
    ],
)
def test_p1_aliases(q: Any, alias: str, after: datetime, expected: datetime) -> None:
    assert Periodic("a", alias, q).next_after(after) == expected


def test_p1_time_zone_and_dst(q: Any) -> None:
    daily = Periodic("nightly", "30 2 * * *", q, tz="America/New_York")
    # Spring forward (2026-03-08, 02:00 -> 03:00): 02:30 does not exist; it runs at 03:00.
    got = daily.next_after(datetime(2026, 3, 8, 0, 0, tzinfo=NY))
    assert got.astimezone(UTC) == utc(2026, 3, 8, 7, 0)
    # and the day after, 02:30 EDT again.
    assert daily.next_after(got).astimezone(UTC) == utc(2026, 3, 9, 6, 30)
    # Fall back (2026-11-01, 02:00 -> 01:00): 01:30 happens twice and runs once.
    once = Periodic("late", "30 1 * * *", q, tz="America/New_York")
    first = once.next_after(datetime(2026, 11, 1, 0, 0, tzinfo=NY))
    assert first.astimezone(UTC) == utc(2026, 11, 1, 5, 30)
    assert once.next_after(first).astimezone(UTC) == utc(2026, 11, 2, 6, 30)
    # A sub-hourly schedule follows real time through the repeated hour.
    half = Periodic("half", "*/30 * * * *", q, tz=NY)
    at, seen = utc(2026, 11, 1, 4, 45), []
    for _ in range(5):
        at = half.next_after(at)
        seen.append(at.astimezone(UTC))
    assert seen == [utc(2026, 11, 1, 5, m) for m in (0, 30)] + [
        utc(2026, 11, 1, 6, 0),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 1, 7, 0),
    ]
    # last_at_or_before agrees in the repeated hour (second 01:45 EST -> 01:30 EST).
    assert half.last_at_or_before(utc(2026, 11, 1, 6, 45)) == utc(2026, 11, 1, 6, 30)
    assert got.tzinfo == NY  # next_after answers in the schedule's zone


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cron": "* * * *"}, ValueError, "five fields"),
        ({"cron": "61 * * * *"}, ValueError, "cron '61"),
        ({"cron": "@reboot"}, ValueError, "unknown cron alias"),
        ({"tz": "Mars/Olympus"}, ValueError, "unknown time zone"),
        ({"name": ""}, ValueError, "must not be empty"),
        ({"name": "a\x00b"}, ValueError, "control"),
        ({"args": {"x": 1}}, TypeError, "payload bytes"),
        ({"target": "ticks"}, TypeError, "Queue, AsyncQueue or task"),
    ],
)
def test_p1_declaration_is_checked(q: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    given = {"name": "n", "cron": "* * * * *", "target": q, **kwargs}
    with pytest.raises(error, match=match):
        Periodic(**given)


def test_p1_task_args_are_checked_at_declaration(store: Store) -> None:
    tasks = Tasks(store)

    @tasks.task(queue="reports")
    def report(day: str) -> None: ...

    with pytest.raises(TypeError, match="missing a required argument"):
        Periodic("r", "@daily", report)
    with pytest.raises(TypeError, match="kwargs dict"):
        Periodic("r", "@daily", report, b"x")
    assert json.loads(Periodic("r", "@daily", report, {"day": "today"}).payload)["kwargs"] == {
        "day": "today"
    }


def test_p1_naive_datetime_is_refused(q: Any) -> None:
    with pytest.raises(ValueError, match="aware"):
        Periodic("n", "* * * * *", q).next_after(datetime(2026, 1, 1))


# --- firing against the database, with an injectable clock --------------------------------


def _jobs(engine: Engine, queue: str = "ticks") -> list[tuple[datetime, bytes]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT run_at, payload FROM alkstore.jobs WHERE queue = :q ORDER BY id"),
            {"q": queue},
        )
        return [(r[0], bytes(r[1])) for r in rows]


def test_p1_slots_fire_once_missed_ones_collapse_to_the_latest(
    store: Store, engine: Engine
) -> None:
    p = Periodic("tick", "*/10 * * * *", store.queue("ticks"), b"tick")

    def at(*hm: int) -> Any:
        return store._run(p.fire_call(utc(2026, 1, 1, *hm)), atomic=True)

    # Never seen before: starts at its next slot (10:10), 10:00 is not enqueued.
    assert at(10, 3).job_id is None
    assert at(10, 9).job_id is None and _jobs(engine) == []
    fired = at(10, 10)
    assert fired.slot == utc(2026, 1, 1, 10, 10) and fired.job_id is not None
    assert _jobs(engine) == [(utc(2026, 1, 1, 10, 10), b"tick")]  # run_at = the slot
    assert at(10, 15).job_id is None  # same slot again: nothing
    # No worker from 10:15 to 11:05: 10:20 .. 11:00 missed; only 11:00 is enqueued.
    late = at(11, 5)
    assert late.slot == utc(2026, 1, 1, 11, 0)
    assert [r for r, _ in _jobs(engine)] == [utc(2026, 1, 1, 10, 10), utc(2026, 1, 1, 11, 0)]
    # A clock that reads earlier (another host) never fires an older slot.
    assert at(10, 50).job_id is None
    assert len(_jobs(engine)) == 2


def test_p1_a_task_target_defers_its_envelope(store: Store, engine: Engine) -> None:
    tasks = Tasks(store)

    @tasks.task(queue="reports", name="daily-report")
    def report(day: str) -> None: ...

    p = Periodic("report", "0 6 * * *", report, {"day": "yesterday"}, tz="Europe/Riga")
    store._run(p.fire_call(utc(2026, 6, 1, 12)), atomic=True)
    fired = store._run(p.fire_call(utc(2026, 6, 2, 3, 0, 1)), atomic=True)  # 06:00 EEST = 03:00Z
    assert fired.slot == utc(2026, 6, 2, 3)
    ((run_at, payload),) = _jobs(engine, "reports")
    assert run_at == utc(2026, 6, 2, 3)
    assert decode_envelope(payload) == ("daily-report", {"day": "yesterday"})


def test_p1_racing_transactions_make_one_job(store: Store, engine: Engine) -> None:
    p = Periodic("race", "* * * * *", store.queue("ticks"))
    store._run(p.fire_call(utc(2026, 1, 1, 9, 59, 30)), atomic=True)
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def fire() -> None:
        barrier.wait()
        results.append(store._run(p.fire_call(utc(2026, 1, 1, 10, 0, 1)), atomic=True))

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.job_id is not None for r in results) == 1
    assert _jobs(engine) == [(utc(2026, 1, 1, 10, 0), b"")]


async def test_p1_async_store_fires_the_same_way(async_engine: AsyncEngine, engine: Engine) -> None:
    astore = AsyncStore(async_engine)
    p = Periodic("atick", "@hourly", astore.queue("ticks"), b"a")
    assert p.is_async
    await astore._run(p.fire_call(utc(2026, 1, 1, 9, 30)), atomic=True)
    fired = await astore._run(p.fire_call(utc(2026, 1, 1, 12, 30)), atomic=True)
    assert fired.slot == utc(2026, 1, 1, 12)
    assert _jobs(engine) == [(utc(2026, 1, 1, 12), b"a")]
    await astore.close()


# --- in a worker ------------------------------------------------------------------------


def test_p1_worker_kinds_and_names_are_checked(store: Store, async_engine: AsyncEngine) -> None:
    q = store.queue("ticks")
    p = Periodic("t", "* * * * *", q)
    with pytest.raises(ValueError, match="appears twice"):
        Worker({q: lambda job: None}, periodic=[p, Periodic("t", "@daily", q)])
    with pytest.raises(TypeError, match="list of Periodic"):
        Worker({q: lambda job: None}, periodic=p)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="give it to Worker"):
        AsyncWorker({AsyncStore(async_engine).queue("x"): lambda job: None}, periodic=[p])
    assert Worker({q: lambda job: None}, periodic=[p]).periodic == (p,)


@pytest.mark.parametrize("kind", KINDS)
def test_p1_worker_fires_every_second_schedule(
    kind: str, database_url: URL, engine: Engine
) -> None:
    # A six-field (seconds) expression: several slots within a short test.
    cls = Worker if kind == "sync" else AsyncWorker

    def build(s: Any) -> Any:
        tick = Periodic("tick", "* * * * * *", s.queue("ticks"), b"t")
        return cls({s.queue("other"): lambda job: None}, periodic=[tick], poll_interval=0.2)

    running = start_worker(kind, database_url, build)
    try:
        wait_for(lambda: len(_jobs(engine)) >= 2, timeout=15)
    finally:
        running.stop()
    slots = [r for r, _ in _jobs(engine)]
    assert len(slots) == len(set(slots))
    assert all(s.microsecond == 0 for s in slots)
    assert slots == sorted(slots)


# --- the CLI ------------------------------------------------------------------------------

_APP = """
import os
from alkstore_sa import Periodic, Store, Tasks, Worker

store = Store.from_url(os.environ["ALKSTORE_DATABASE_URL"])
tasks = Tasks(store)

@tasks.task(queue="reports")
def report(day: str) -> None: ...

schedules = [
    Periodic("nightly-report", "30 2 * * *", report, {"day": "yesterday"}, tz="Europe/Riga"),
    Periodic("heartbeat", "@hourly", store.queue("pings"), b"ping"),
]
worker = Worker(tasks, periodic=schedules)
"""


def test_p1_cli_lists_schedules_and_next_times(
    database_url: URL, store: Store, tmp_path: Path
) -> None:
    import os

    (tmp_path / "schedapp.py").write_text(textwrap.dedent(_APP))
    env = {**os.environ, "ALKSTORE_DATABASE_URL": database_url.render_as_string(False)}
    env.pop("ALKSTORE_SCHEMA", None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "alkstore_sa.cli", "periodic", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = cli("--app", "schedapp:worker")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["name", "cron", "tz", "target"]
    assert lines[1].startswith("nightly-report  30 2 * * *")
    assert "Europe/Riga" in lines[1] and "task tests" not in lines[1]
    listing = json.loads(cli("--app", "schedapp:schedules", "--json").stdout)
    assert [s["name"] for s in listing] == ["nightly-report", "heartbeat"]
    assert listing[1]["target"] == "queue pings" and listing[1]["last_slot"] == "-"
    now = datetime.now(UTC)
    nxt = datetime.fromisoformat(listing[1]["next"])
    assert timedelta(0) < nxt - now <= timedelta(hours=1, seconds=5)
    assert nxt.minute == 0 and nxt.second == 0
    nightly = datetime.fromisoformat(listing[0]["next"]).astimezone(ZoneInfo("Europe/Riga"))
    assert (nightly.hour, nightly.minute) == (2, 30)
    bad = cli("--app", "schedapp:store")
    assert bad.returncode == 2 and "not a Worker or AsyncWorker with periodic=" in bad.stderr
