"""The operations role of docs/privileges.md: every operation it lists runs under it
(the dashboard's pages and actions included, both faces), the grants it was
missing before are shown to be needed, and the table of what each grant also
allows is checked where it says a role *can* do something it was not meant to.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from alkstore_sa import QueueOpts

from .._web import post, web_client
from . import test_privileges
from .test_privileges import INSUFFICIENT_PRIVILEGE, Roles

roles = test_privileges.roles  # the fixture: the roles of docs/privileges.md


def _refused(call: Any) -> None:
    with pytest.raises(ProgrammingError) as info:
        call()
    assert getattr(info.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE, info.value


def _dead(roles: Roles, queue: str, n: int) -> list[int]:
    """``n`` dead letters of ``queue``, made by the app and the worker roles."""
    ids = roles.app.queue(queue).enqueue_many([b"%d" % i for i in range(n)])
    for h in roles.worker.queue(queue).claim_batch("w", n):
        assert h.fail(f"boom {h.id}") is True
    return ids


def _sql(engine: Engine, sql: str) -> Any:
    with engine.begin() as conn:
        result = conn.execute(text(sql))
        return result.all() if result.returns_rows else result.rowcount


def test_privileges_ops_role_runs_every_operation(roles: Roles) -> None:
    dead = _dead(roles, "ops", 6)
    live = roles.app.queue("ops-live").enqueue_many([b"a", b"b", b"c"])
    q = roles.ops.queue("ops", QueueOpts(dead_letter_retention=0))
    assert q.stats().dead == 6 and roles.ops.stats()["ops-live"].due == 3
    assert roles.ops.queue_names() == ["ops", "ops-live"]
    assert {j.id for j in q.jobs("dead")} == set(dead)
    assert {j.id for j in roles.ops.queue("ops-live").jobs("pending")} == set(live)
    assert q.get_job(dead[0]) is not None
    _sql(roles.ops.engine, "SELECT count(*) FROM alkstore.throughput")  # the chart's table
    # requeue (FOR UPDATE on dead_jobs, INSERT into jobs), by id and all, in a session too
    assert q.requeue_dead([dead[0]]) == 1
    with Session(roles.ops.engine) as session:
        assert q.requeue_dead([dead[1]], session=session) == 1
        session.commit()
    # purge: by id, by age, all
    assert q.purge_dead([dead[2]]) == 1
    assert q.purge_dead(older_than=0) == 3
    _dead(roles, "ops", 2)
    assert q.requeue_dead(limit=1) == 1 and q.purge_dead() == 1
    # pause / resume, on their own and in a session
    assert q.pause() is True and q.stats().paused is True
    with Session(roles.ops.engine) as session:
        assert q.resume(session=session) is True
        session.commit()
    # cancel (DELETE on jobs), on its own and in a session
    q = roles.ops.queue("ops-live")
    assert q.cancel(live[0]) is True
    with Session(roles.ops.engine) as session:
        assert q.cancel(live[1], session=session) is True
        session.commit()
    assert q.get_job(live[0]) is None and q.get_job(live[1]) is None


def test_privileges_ops_role_needs_the_grants_the_old_doc_lacked(
    roles: Roles, engine: Engine
) -> None:
    """Without UPDATE on dead_jobs a requeue's FOR UPDATE is refused; without DELETE on
    jobs a cancel is (the grants docs/privileges.md gave before issue 24)."""
    dead = _dead(roles, "old", 1)
    live = roles.app.queue("old").enqueue(b"x")
    role = roles.ops_url.query["options"].removeprefix("-c role=")
    with engine.begin() as conn:
        conn.exec_driver_sql(f'REVOKE UPDATE (died_at) ON alkstore.dead_jobs FROM "{role}"')
        conn.exec_driver_sql(f'REVOKE DELETE ON alkstore.jobs FROM "{role}"')
    q = roles.ops.queue("old")
    _refused(lambda: q.requeue_dead(dead))
    _refused(lambda: q.cancel(live))
    assert roles.owner.queue("old").stats().dead == 1


def test_privileges_cancel_needs_the_row_lock_grant_on_workflows(
    roles: Roles, engine: Engine
) -> None:
    """G2: without UPDATE on workflows (the grants of 0013's first release) every
    cancel is refused, a plain job's too: the statement names the table whose row
    a waiting step's cancel locks first."""
    live = roles.app.queue("lock").enqueue(b"x")
    role = roles.ops_url.query["options"].removeprefix("-c role=")
    with engine.begin() as conn:
        conn.exec_driver_sql(f'REVOKE UPDATE (name) ON alkstore.workflows FROM "{role}"')
    _refused(lambda: roles.ops.queue("lock").cancel(live))
    assert roles.owner.queue("lock").get_job(live) is not None


def test_privileges_ops_role_cannot_claim_ack_or_change_live_jobs(roles: Roles) -> None:
    job_id = roles.app.queue("ops2").enqueue(b"x")
    q = roles.ops.queue("ops2")
    _refused(lambda: q.claim_batch("ops", 1))
    _refused(lambda: q.sweep_expired())
    _refused(lambda: _sql(roles.ops.engine, "UPDATE alkstore.jobs SET priority = 9"))
    _refused(lambda: _sql(roles.ops.engine, "UPDATE alkstore.dead_jobs SET payload = '\\x01'"))
    _refused(lambda: _sql(roles.ops.engine, "DELETE FROM alkstore.throughput"))
    job = roles.owner.queue("ops2").get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0


def test_privileges_table_what_each_grant_also_allows(roles: Roles) -> None:
    """The table's rows, each done by hand under its role: what the doc warns of is so."""
    good = roles.app.queue("t").enqueue(b"good")
    # app / ops, INSERT on jobs: a forged job at any priority jumps the queue.
    for store in (roles.app, roles.ops):
        _sql(
            store.engine,
            "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
            " visibility_timeout, priority) VALUES ('t', '\\x66', now(), 1, '1 s', 2147483647)",
        )
    first = roles.worker.queue("t").claim_one("w")
    assert first is not None and first.job.payload == b"f" and first.job.priority == 2**31 - 1
    # app, SELECT: every queue's payloads, not only its own.
    assert _sql(roles.app.engine, "SELECT count(*) FROM alkstore.jobs WHERE queue <> 'mine'")
    # worker, DELETE on jobs: an unclaimed job vanishes without a dead letter.
    _sql(roles.worker.engine, f"DELETE FROM alkstore.jobs WHERE id = {good}")
    assert roles.owner.queue("t").get_job(good) is None
    # worker, INSERT on dead_jobs: a forged dead letter, which a requeue makes live.
    _sql(
        roles.worker.engine,
        "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
        " max_attempts, visibility_timeout, created_at, died_at) VALUES"
        " (-5, 't', '\\x00', 0, now(), 1, 1, '1 s', now(), now())",
    )
    assert roles.ops.queue("t").requeue_dead([-5]) == 1
    # ops, UPDATE (died_at): a dead letter kept from its retention purge.
    [dead] = _dead(roles, "t2", 1)
    _sql(
        roles.ops.engine, f"UPDATE alkstore.dead_jobs SET died_at = '9999-01-01' WHERE id = {dead}"
    )
    assert roles.ops.queue("t2").purge_dead(older_than=3600) == 0
    # ops, INSERT on paused_queues: any queue, one never used included.
    assert roles.ops.queue("never-used").pause() is True


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_privileges_dashboard_pages_and_actions_run_under_the_ops_role(
    kind: str, roles: Roles
) -> None:
    dead = _dead(roles, "web", 4)
    live = roles.app.queue("web").enqueue(b"x")
    with web_client(kind, roles.ops.engine, roles.ops_url) as client:
        for path in (
            "/",
            "/workers",
            "/queues/web",
            "/queues/web/jobs?status=due",
            "/queues/web/dead",
            f"/queues/web/jobs/{dead[0]}",
        ):
            assert client.get(path).status_code == 200, path
        for path, data in (
            ("/queues/web/pause", {}),
            ("/queues/web/resume", {}),
            ("/queues/web/requeue", {"id": str(dead[0])}),
            ("/queues/web/requeue", {"all": "1", "limit": "1"}),
            ("/queues/web/purge", {"id": str(dead[2])}),
            ("/queues/web/purge", {"all": "1", "limit": "10"}),
            (f"/queues/web/jobs/{live}/cancel", {}),
        ):
            r = post(client, path, data)
            assert r.status_code in (200, 303), (path, r.status_code, r.text[:300])
    owner = roles.owner.queue("web")
    time.sleep(0)  # every action above answered after its transaction
    assert owner.stats().dead == 0 and owner.get_job(live) is None
