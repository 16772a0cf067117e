"""Least privilege: the GRANTs in docs/privileges.md, run as written.

The SQL blocks of ``docs/privileges.md`` are executed verbatim (role names
made unique: roles are cluster-wide), then every operation runs under the
app role and the worker role through engines whose connections
``SET ROLE`` at startup (``?options=-c role=...``).  The app role enqueues
and reads; it cannot claim, ack, cancel, sweep or delete.  The worker role
runs every consumer operation; it cannot enqueue.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from alkstore_sa import (
    AsyncWorker,
    EnqueueOpts,
    FailJob,
    Job,
    QueueOpts,
    Store,
    SweepResult,
    Worker,
    Workflow,
)
from alkstore_sa.store import queue_parts, run_call

from .._workers import KINDS, handler, start_worker, wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "privileges.md"
INSUFFICIENT_PRIVILEGE = "42501"
_n = itertools.count()


@dataclass
class Roles:
    app: Store
    worker: Store
    owner: Store
    worker_url: URL  # connects as the worker role (for the Worker runtime's own engine)
    app_url: URL
    ops: Store
    ops_url: URL


def _grant_blocks() -> list[str]:
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    return [b for b in blocks if "GRANT" in b and "CREATE ROLE alkstore_" in b]


def _as(url: URL, role: str) -> URL:
    return url.update_query_dict({"options": f"-c role={role}"})


def _engine_as(url: URL, role: str) -> Engine:
    return create_engine(_as(url, role))


@pytest.fixture
def roles(database_url: URL, engine: Engine) -> Iterator[Roles]:
    with engine.connect() as conn:
        can = conn.execute(
            text("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
        ).scalar()
    if not can:
        pytest.skip("the test database user may not CREATE ROLE (needed to test the GRANTs)")
    blocks = _grant_blocks()
    assert len(blocks) == 3, "docs/privileges.md must hold the app, worker and ops SQL blocks"
    suffix = f"_{os.getpid()}_{next(_n)}"
    app, worker, ops = (f"alkstore_{r}{suffix}" for r in ("app", "worker", "ops"))
    with engine.begin() as conn:
        for block in blocks:
            sql = (
                block.replace("alkstore_app", app)
                .replace("alkstore_worker", worker)
                .replace("alkstore_ops", ops)
            )
            conn.exec_driver_sql(sql)
    engines = [_engine_as(database_url, r) for r in (app, worker, ops)]
    try:
        yield Roles(
            app=Store(engines[0]),
            worker=Store(engines[1]),
            owner=Store(engine),
            worker_url=_as(database_url, worker),
            app_url=_as(database_url, app),
            ops=Store(engines[2]),
            ops_url=_as(database_url, ops),
        )
    finally:
        for eng in engines:
            eng.dispose()
        with engine.begin() as conn:
            for role in (app, worker, ops):
                conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
                conn.exec_driver_sql(f'DROP ROLE "{role}"')


def _refused(call: Callable[[], Any]) -> None:
    with pytest.raises(ProgrammingError) as info:
        call()
    assert getattr(info.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE, info.value


def test_privileges_roles_are_really_in_effect(roles: Roles) -> None:
    with roles.app.engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar().startswith("alkstore_app_")
    with roles.worker.engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar().startswith("alkstore_worker_")


def test_privileges_app_role_enqueues_and_reads_its_jobs(roles: Roles) -> None:
    q = roles.app.queue("emails")
    one = q.enqueue(b"a")
    many = q.enqueue_many([b"b", b"c"])
    with Session(roles.app.engine) as session:
        in_tx = q.enqueue(b"d", session=session)
        session.commit()
    for job_id, payload in zip([one, *many, in_tx], [b"a", b"b", b"c", b"d"], strict=True):
        job = q.get_job(job_id)
        assert job is not None and job.payload == payload and job.status == "pending"
    # U1: a keyed enqueue (INSERT ... ON CONFLICT DO NOTHING, then the look-up of a
    # live key) needs nothing beyond INSERT and SELECT.
    keyed = q.enqueue(b"k", EnqueueOpts(unique_key="k"))
    assert q.enqueue(b"k2", EnqueueOpts(unique_key="k")) == keyed
    assert q.enqueue_many([b"k3", b"n"], unique_keys=["k", "new"])[0] == keyed
    # A dead letter is readable too.
    [handle] = roles.worker.queue("emails").claim_batch("w", 1)
    assert handle.fail("bounced") is True
    dead = q.get_job(handle.id)
    assert dead is not None and dead.status == "dead" and dead.last_error == "bounced"


def test_privileges_app_role_cannot_claim_ack_cancel_sweep_or_delete(roles: Roles) -> None:
    q = roles.app.queue("emails")
    job_id = q.enqueue(b"x")
    _refused(lambda: q.claim_batch("app", 1))
    _refused(lambda: q.claim_one("app"))
    _refused(lambda: q.cancel(job_id))
    _refused(lambda: q.ack_batch([job_id]))
    _refused(lambda: q.sweep_expired())
    for statement in (
        "DELETE FROM alkstore.jobs",
        "UPDATE alkstore.jobs SET status = 'processing'",
        "DELETE FROM alkstore.dead_jobs",
        "INSERT INTO alkstore.dead_jobs SELECT * FROM alkstore.dead_jobs",
    ):
        with roles.app.engine.connect() as conn:
            _refused(lambda s=statement, c=conn: c.exec_driver_sql(s))  # type: ignore[misc]
    job = roles.owner.queue("emails").get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0


def test_privileges_worker_role_runs_every_consumer_operation(roles: Roles) -> None:
    ids = roles.app.queue("jobs", QueueOpts(max_attempts=2)).enqueue_many(
        [b"%d" % i for i in range(6)]
    )
    q = roles.worker.queue("jobs")

    handles = q.claim_batch("worker", 6)
    assert [h.id for h in handles] == ids
    acked, retried, failed, batch, cancelled, released = handles
    assert acked.heartbeat(30) is True
    with Session(roles.worker.engine) as session:
        assert acked.ack(session=session) is True
        session.commit()
    assert retried.retry("later", 0) is True
    assert failed.fail("no") is True
    assert q.ack_batch([batch.id]) == 1
    assert q.cancel(cancelled.id) is True
    # The worker runtime's batched calls: heartbeat many, release, ack many.
    core = q._core
    claim = (released.id, released.job.attempts)
    assert roles.worker._run(core.heartbeat_claims([claim])) == [released.id]
    assert roles.worker._run(core.release(*claim)) == "released"
    again = {h.id: h for h in q.claim_batch("worker", 2)}
    assert sorted(again) == sorted([retried.id, released.id])
    assert again[retried.id].retry("again") is True  # attempt 2 of 2: to dead (Q18)
    assert roles.worker._run(core.ack_claims([(released.id, 2)])) == [released.id]
    for job_id, error in ((retried.id, "again"), (failed.id, "no")):
        job = q.get_job(job_id)
        assert job is not None and job.status == "dead" and job.last_error == error

    # A lapsed last attempt is buried by the next claim (Q12).
    short = roles.app.queue("short", QueueOpts(visibility_timeout=0.05, max_attempts=1))
    lapsed_id = short.enqueue(b"s")
    [h] = roles.worker.queue("short").claim_batch("worker", 1)
    assert h.id == lapsed_id
    # An expired row is swept, and dead rows purged past their retention (Q25).
    roles.app.queue("jobs").enqueue(b"e", EnqueueOpts(expires_in=0.05))
    time.sleep(0.1)
    assert roles.worker.queue("short").claim_batch("worker", 1) == []
    buried = roles.worker.queue("short").get_job(lapsed_id)
    assert buried is not None and buried.last_error == "max attempts exceeded"
    purging = roles.worker.queue("jobs", QueueOpts(dead_letter_retention=0))
    assert purging.sweep_expired() == SweepResult(expired=1, purged=3)

    _refused(lambda: q.enqueue(b"no"))


def test_privileges_workflows_deferred_by_app_cancelled_by_worker_and_ops(roles: Roles) -> None:
    """G1, G2: the app role defers a workflow; the worker and the ops roles each
    cancel a waiting step (its workflow's row lock first) and a live one; the
    triggers promote and cancel downstream steps as their owner."""
    q = roles.app.queue("wf")
    wf = Workflow(roles.app, name="grants")
    a = wf.add_job(q, b"a")
    waiting = [wf.add_job(q, b"w", after=[a]) for _ in range(2)]
    live = [wf.add_job(q, b"l", after=[a]) for _ in range(2)]
    run = wf.defer()
    for role, step in zip((roles.worker, roles.ops), waiting, strict=True):
        assert role.queue("wf").cancel(run.job_ids[step]) is True
    [h] = roles.worker.queue("wf").claim_batch("w", 5)
    assert h.id == run.job_ids[a] and h.ack() is True  # promotes the two left
    for role, step in zip((roles.worker, roles.ops), live, strict=True):
        assert role.queue("wf").cancel(run.job_ids[step]) is True
    status = roles.owner.workflow(run.id)
    assert (status.completed, status.cancelled, status.finished) == (1, 4, True)


@pytest.mark.parametrize("kind", KINDS)
def test_privileges_worker_runtime_runs_under_the_worker_role(kind: str, roles: Roles) -> None:
    ids = roles.app.queue("runtime").enqueue_many([b"ok"] * 5 + [b"fail"])

    def work(job: Job) -> None:
        if job.payload == b"fail":
            raise FailJob("refused")

    def build(store: Any) -> Worker | AsyncWorker:
        cls = Worker if kind == "sync" else AsyncWorker
        return cls(
            {store.queue("runtime"): handler(kind, work)}, poll_interval=0.2, handle_signals=False
        )

    if kind == "asyncpg":
        # asyncpg takes no libpq ``options``: the role goes in its server_settings.
        url = roles.worker_url.difference_update_query(["options"])
        role = roles.worker_url.query["options"].removeprefix("-c role=")
        kw: dict[str, Any] = {"connect_args": {"server_settings": {"role": role}}}
        running = start_worker(kind, url, build, **kw)
    else:
        running = start_worker(kind, roles.worker_url, build)
    q = roles.owner.queue("runtime")
    try:
        wait_for(lambda: all(q.get_job(i) is None for i in ids[:5]), timeout=15)
        wait_for(lambda: q.get_job(ids[5]).status == "dead", timeout=15)  # type: ignore[union-attr]
        # V1: it registered itself under the worker role, which may read the registry too.
        me = running.worker.worker_id
        wait_for(lambda: [w.worker_id for w in roles.owner.workers()] == [me], timeout=15)
        assert [w.worker_id for w in roles.worker.workers()] == [me]
    finally:
        running.stop()
    assert q.get_job(ids[5]).last_error == "refused"  # type: ignore[union-attr]
    assert roles.owner.workers() == []  # removed at the graceful stop


def test_privileges_worker_runtime_under_the_app_role_claims_nothing(roles: Roles) -> None:
    """The control: the same runtime connected as the app role is refused at
    start (B5: run() reads every table it needs before claiming anything)."""
    job_id = roles.app.queue("runtime").enqueue(b"x")

    def build(store: Any) -> Worker | AsyncWorker:
        return Worker({store.queue("runtime"): lambda job: None}, poll_interval=0.1)

    running = start_worker("sync", roles.app_url, build)
    with pytest.raises(ProgrammingError, match="permission denied"):
        running.join(timeout=10)
    job = roles.owner.queue("runtime").get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 0


def test_privileges_worker_role_may_not_vacuum_and_is_told_so(roles: Roles) -> None:
    """The worker's vacuum needs the table's owner: the least-privilege
    worker role gets "not permitted" (the Worker then leaves it to autovacuum)."""
    _, core = queue_parts(roles.worker.queue("vac"))
    assert run_call(roles.worker, core.vacuum_jobs(0, 0.0)) == "not permitted"
    _, core = queue_parts(roles.owner.queue("vac"))
    assert run_call(roles.owner, core.vacuum_jobs(0, 0.0)) in ("vacuumed", "not needed")
