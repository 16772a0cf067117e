"""F2, F3 across processes: handlers in several worker processes log when they start
and end (database clock); a window query over those rows finds the most that ever
overlapped -- per queue and per group -- and it never passes the limit, with claims
ahead on and one worker killed (-9) mid-drain (its jobs lapse and run again), and
with the limit lowered mid-drain: once every job claimed before the change has
ended, the overlap of every span, old or new, never passes the new limit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Engine

from alkstore_sa import EnqueueOpts, Limits, QueueOpts, Store

from .._drivers import ASYNC_FACES, async_url
from .._qtools import sql
from .._workers import wait_for

SCRIPT = Path(__file__).with_name("_flow_worker.py")
ROOT = SCRIPT.parents[2]

# The most rows of one partition that held a span at once: +1 at each start,
# -1 at each end, summed in time order (a start and an end at the same instant:
# the end first, so touching spans do not count as overlapping).  ``since``: only
# the instants after it, every span still counted (one that began before it too).
PEAK = """
WITH events AS (
    SELECT {part} AS part, started AS at, 1 AS delta FROM flow_spans WHERE {where}
    UNION ALL
    SELECT {part}, ended, -1 FROM flow_spans WHERE {where}
), running AS (
    SELECT part, at, sum(delta) OVER (PARTITION BY part ORDER BY at, delta
                                      ROWS UNBOUNDED PRECEDING) AS n
    FROM events
)
SELECT coalesce(max(n), 0) AS peak FROM running WHERE {since}
"""


def _peak(
    engine: Engine, part: str, where: str = "true", since: str = "true", **params: Any
) -> int:
    text = PEAK.format(part=part, where=where, since=since)
    return int(sql(engine, text, **params)[0]["peak"])


def _start(cfg: dict[str, Any], log: Path) -> subprocess.Popen[str]:
    with open(log, "w") as err:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), json.dumps(cfg)],
            stderr=err,
            text=True,
            cwd=ROOT,
        )


# With a group limit the claim is the general limited one; with concurrency
# alone, the short one (``flow_claim.claim_concurrency``).
@pytest.mark.parametrize("gconc", [1, None], ids=["groups", "queue-only"])
def test_f2_f3_overlap_across_processes_stays_within_the_limits_through_a_kill(
    database_url: URL, engine: Engine, tmp_path: Path, gconc: int | None
) -> None:
    sql(
        engine,
        "CREATE TABLE flow_spans (job_id bigint, attempt int, grp text, pid int,"
        " claimed timestamptz, started timestamptz, ended timestamptz)",
    )
    queue, conc = "f-overlap", 3
    with Store(engine) as store:
        q = store.queue(queue, QueueOpts(visibility_timeout=1))
        q.set_limits(Limits(concurrency=conc, group_concurrency=gconc))
        for g in range(4):
            q.enqueue_many([b"x"] * 6, EnqueueOpts(group=f"g{g}"))
        q.enqueue_many([b"y"] * 20)
        total = 44
        url = database_url.render_as_string(hide_password=False)
        kinds = ["sync", *ASYNC_FACES][:3]
        procs = []
        for i, kind in enumerate(kinds):
            cfg = {
                "url": url,
                "async_url": async_url(
                    database_url, kind if kind != "sync" else "async"
                ).render_as_string(hide_password=False),
                "kind": kind,
                "queue": queue,
                "concurrency": 4,  # more slots than the limit: claims ahead happen
                "sleep": 0.06,
                "visibility_timeout": 1,
            }
            procs.append(_start(cfg, tmp_path / f"w{i}.log"))
        try:
            wait_for(lambda: len(sql(engine, "SELECT 1 FROM flow_spans")) >= 5, timeout=30)
            # Whichever worker is inside a handler now (waiting for one chosen in
            # advance could miss it: the others may take every job left).
            by_pid = {p.pid: p for p in procs}
            running = "SELECT pid FROM flow_spans WHERE ended IS NULL"
            busy = wait_for(
                lambda: [r["pid"] for r in sql(engine, running) if r["pid"] in by_pid],
                timeout=30,
                every=0.001,
            )
            victim = by_pid[busy[0]]
            victim.kill()  # -9: its claims lapse and run again elsewhere
            victim.wait()
            killed_at = sql(engine, "SELECT clock_timestamp() AS t")[0]["t"]
            # Lowered mid-drain.  Read after set_limits() returned: every claim
            # made after this time read the new limit (its lock waited for ours).
            q.set_limits(Limits(concurrency=conc - 1, group_concurrency=gconc))
            changed_at = sql(engine, "SELECT clock_timestamp() AS t")[0]["t"]
            wait_for(lambda: q.stats().due + q.stats().processing == 0, timeout=60)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        # The victim ran nothing after its kill.  Its spans end there -- and a start
        # it had sent but its server backend wrote only after the kill (a killed
        # client's statement still runs and commits) never ran at all: left open,
        # it would count as running to the end (seen once in CI, under load).
        victim_spans = {"pid": victim.pid, "k": killed_at}
        sql(engine, "DELETE FROM flow_spans WHERE pid = :pid AND started >= :k", **victim_spans)
        sql(
            engine,
            "UPDATE flow_spans SET ended = :k WHERE pid = :pid AND ended IS NULL",
            **victim_spans,
        )
        spans = sql(engine, "SELECT count(DISTINCT job_id) AS n FROM flow_spans")[0]["n"]
        assert spans == total
    assert _peak(engine, "'queue'") <= conc
    # The claim cycle the change could not reach: jobs claimed before it (claimed
    # ahead, or running) still start and finish.  Once the last of them has
    # ended, every span counts -- those begun before too -- against the new limit.
    settled = sql(
        engine,
        "SELECT max(ended) AS t FROM flow_spans WHERE claimed <= :at",
        at=changed_at,
    )[0]["t"]
    after = {"settled": settled}
    spans_after = sql(
        engine,
        "SELECT pid, job_id, attempt, claimed, started, ended FROM flow_spans"
        " WHERE ended IS NULL OR ended > :s ORDER BY started",
        s=settled,
    )
    assert _peak(engine, "'queue'", since="at > :settled", **after) <= conc - 1, (
        f"killed {killed_at}, changed {changed_at}, settled {settled}, victim {victim.pid}:\n"
        + "\n".join(str(dict(r)) for r in spans_after)
    )
    # And the check had work to see: jobs ran after it, the new limit was reached.
    later = sql(engine, "SELECT count(*) AS n FROM flow_spans WHERE started > :s", s=settled)
    assert later[0]["n"] >= 6
    assert _peak(engine, "'queue'", since="at > :settled", **after) == conc - 1
    if gconc is not None:
        assert _peak(engine, "grp", "grp IS NOT NULL") <= gconc
    # The limit was used, not merely respected: the jobs ran concurrently.
    assert _peak(engine, "'queue'") == conc
    reruns = sql(engine, "SELECT count(*) AS n FROM flow_spans WHERE attempt > 1")[0]["n"]
    assert reruns >= 1  # the killed worker's job ran again
    print("peaks", reruns, _peak(engine, "'queue'"), _peak(engine, "grp", "grp IS NOT NULL"))
