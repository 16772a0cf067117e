"""V3: one URL for every command, `cancel`, `jobs --json` decoding task envelopes,
a light `--help`, and `dev-db`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import URL

from alkstore_sa import Store

from .test_cli import _text, alkstore, one_line_error

FLAVOURS = ["postgresql", "postgresql+psycopg", "postgresql+asyncpg"]


def _flavour(url: URL, driver: str) -> str:
    return _text(url).replace("postgresql+psycopg://", f"{driver}://", 1)


@pytest.fixture
def store_on(database_url: URL) -> Iterator[Store]:
    with Store.from_url(database_url) as s:
        yield s


@pytest.mark.timeout(400)  # a dozen commands, each a fresh interpreter
@pytest.mark.parametrize("driver", FLAVOURS)
def test_v3_every_command_takes_each_url_flavour(
    database_url: URL, store_on: Store, driver: str
) -> None:
    """The issue's reproduction: the app's asyncpg URL was refused by stats and migrate."""
    url = _flavour(database_url, driver)
    q = store_on.queue("v3")
    first, second = q.enqueue(b"a"), q.enqueue(b"b")
    claimed = q.claim_one("w")
    assert claimed is not None and claimed.job.id == first
    assert claimed.fail("boom")  # first: dead; second: pending
    ok: list[list[str]] = [
        ["migrate"],
        ["stats"],
        ["stats", "v3", "--json"],
        ["jobs", "v3", "--json"],
        ["enqueue", "v3", "--payload", "x"],
        ["cancel", "v3", str(second)],
        ["requeue", "v3", str(first)],
        ["purge", "v3", "--all", "--yes"],
        ["pause", "v3"],
        ["resume", "v3"],
        ["sweep", "v3"],
        ["workers"],
        ["workers", "--json"],
    ]
    for i, args in enumerate(ok):  # the URL from the environment and from the flag, in turn
        proc = (
            alkstore(*args, url=url) if i % 2 else alkstore("--database-url", url, *args, url=None)
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert q.get_job(second) is None  # cancelled
    assert q.stats().dead == 0  # requeued, then the purge found none


@pytest.mark.parametrize("driver", FLAVOURS)
def test_v3_migrate_hint_works_for_the_user_who_reads_it(blank_database: URL, driver: str) -> None:
    url = _flavour(blank_database, driver)
    line = one_line_error(alkstore("stats", url=url), 1)
    assert "run `alkstore migrate` first" in line, line
    assert alkstore("migrate", url=url).returncode == 0  # the hint, as written, works
    assert alkstore("stats", url=url).returncode == 0
    # Given with --database-url, the hint says to give it again.
    other = one_line_error(
        alkstore("--database-url", url, "--schema", "other", "stats", url=None), 1
    )
    assert "alkstore migrate --database-url URL --schema other" in other, other
    done = alkstore("migrate", "--database-url", url, "--schema", "other", url=None)
    assert done.returncode == 0, done.stderr


def test_v3_cancel_deletes_live_jobs_and_reports_the_rest(
    store_on: Store, database_url: URL
) -> None:
    q = store_on.queue("c")
    held, died, pending, kept = (q.enqueue(b"x") for _ in range(4))
    assert q.claim_one("w") is not None  # held: processing
    dying = q.claim_one("w")
    assert dying is not None and dying.job.id == died and dying.fail("no")
    foreign = store_on.queue("elsewhere").enqueue(b"y")
    ids = [pending, held, died, foreign, 999999]
    proc = alkstore("cancel", "c", *map(str, ids), url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"c: cancelled 2 jobs; skipped 3 (no live job of this queue: {died}, {foreign}, 999999)"
    ), proc.stdout
    assert q.get_job(pending) is None and q.get_job(held) is None  # Q23: processing too
    job = q.get_job(died)
    assert job is not None and job.status == "dead"  # dead letters are not cancelled
    assert q.get_job(kept) is not None
    assert store_on.queue("elsewhere").get_job(foreign) is not None
    for bad, says in ((["c"], "required: ID"), (["c", "abc"], "a job id is a whole number")):
        usage = alkstore("cancel", *bad, url=database_url)  # argparse's usage error
        assert usage.returncode == 2 and "Traceback" not in usage.stderr, usage.stderr
        assert says in usage.stderr.strip().splitlines()[-1], usage.stderr
