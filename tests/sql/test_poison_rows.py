"""Issue 24: a row nobody can load never wedges its queue.

Each variant is written as the least-privilege app role of
docs/privileges.md could (INSERT on ``jobs``), beside six good jobs with
``max_attempts=2``.  What a CHECK constraint of migration 0009 can refuse is
refused on the way in (and on the worker role's UPDATE); what it cannot
(JSON of the right type but not the library's shape) is claimed, found
undecodable and dead-lettered by id at once.  Either way a Worker runs the
good jobs on their first attempt and never calls the handler for a poison row.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from alkstore_sa import AsyncWorker, Job, Worker

from .._workers import KINDS, handler, start_worker, wait_for
from . import test_privileges
from .test_privileges import Roles

roles = test_privileges.roles  # the fixture: the roles of docs/privileges.md

CHECK_VIOLATION = "23514"

# Refused by a constraint: what, then the INSERT's columns and SQL values.
REFUSED: dict[str, dict[str, str]] = {
    "run_at -infinity": {"run_at": "'-infinity'", "max_attempts": "2147483647"},
    "expires_at infinity": {"expires_at": "'infinity'"},
    "created_at infinity": {"created_at": "'infinity'"},
    "visibility_timeout of 10^8 years": {"visibility_timeout": "'100000000 years'"},
    "errors not an array": {"errors": """'{"a": 1}'"""},
    "attempts at the top of integer": {"attempts": "2147483647", "max_attempts": "2147483647"},
}
# Past every constraint, but not rows the library wrote: found when claimed.
UNDECODABLE: dict[str, dict[str, str]] = {
    "errors of numbers": {"errors": "'[1, 2]'"},
    "errors entry without a time": {"errors": """'[{"attempt": 1, "at": 5}]'"""},
    "errors entry whose error is a number": {
        "errors": """'[{"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": 5}]'"""
    },
}


def _insert(engine: Engine, queue: str, values: dict[str, str]) -> int:
    base_cols = ["queue", "payload", "run_at", "max_attempts", "visibility_timeout"]
    base = {
        "queue": f"'{queue}'",
        "payload": "'\\x00'",
        "run_at": "statement_timestamp()",
        "max_attempts": "2",
        "visibility_timeout": "'2 seconds'",
        **values,
    }
    cols = list(dict.fromkeys([*base_cols, *base]))
    sql = (
        f"INSERT INTO alkstore.jobs ({', '.join(cols)})"
        f" VALUES ({', '.join(base[c] for c in cols)}) RETURNING id"
    )
    with engine.begin() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def _execute(engine: Engine, sql: str) -> None:
    with engine.begin() as conn:
        conn.execute(text(sql))


def _refused(call: Any) -> None:
    with pytest.raises(IntegrityError) as info:
        call()
    assert getattr(info.value.orig, "sqlstate", None) == CHECK_VIOLATION, info.value


def _run_worker(kind: str, roles: Roles, queue: str, work: Any) -> Any:
    def build(store: Any) -> Worker | AsyncWorker:
        cls = Worker if kind == "sync" else AsyncWorker
        return cls({store.queue(queue): handler(kind, work)}, poll_interval=0.2, concurrency=4)

    if kind == "asyncpg":
        url = roles.worker_url.difference_update_query(["options"])
        role = roles.worker_url.query["options"].removeprefix("-c role=")
        kw: dict[str, Any] = {"connect_args": {"server_settings": {"role": role}}}
        return start_worker(kind, url, build, **kw)
    return start_worker(kind, roles.worker_url, build)


def _good_jobs_run_first_time(kind: str, roles: Roles, queue: str) -> tuple[list[int], Any]:
    good = roles.app.queue(queue).enqueue_many([b"good"] * 6)
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def work(job: Job) -> None:
        assert job.payload == b"good", "a poison row reached the handler"
        with lock:
            seen[job.id] = job.attempts

    running = _run_worker(kind, roles, queue, work)
    q = roles.owner.queue(queue)
    try:
        wait_for(lambda: all(q.get_job(i) is None for i in good), timeout=20)
    finally:
        running.stop()
    assert seen == {i: 1 for i in good}  # each ran once, on its first attempt
    return good, q


@pytest.mark.parametrize("kind", KINDS)
def test_poison_rows_refused_by_constraints_never_wedge_the_queue(kind: str, roles: Roles) -> None:
    app = roles.app.engine
    for values in REFUSED.values():
        _refused(lambda v=values: _insert(app, "q1", v))
    # The worker role may UPDATE run_at and errors: the same checks hold.
    victim = roles.app.queue("q1").enqueue(b"good")
    for assignment in ("run_at = '-infinity'", "errors = '\"x\"'", "attempts = max_attempts"):
        sql = f"UPDATE alkstore.jobs SET {assignment} WHERE id = {victim}"
        _refused(lambda s=sql: _execute(roles.worker.engine, s))
    roles.owner.queue("q1").cancel(victim)
    _good_jobs_run_first_time(kind, roles, "q1")


@pytest.mark.parametrize("kind", KINDS)
def test_poison_rows_a_constraint_cannot_catch_are_dead_lettered_by_id(
    kind: str, roles: Roles
) -> None:
    app = roles.app.engine
    poison = {what: _insert(app, "q1", v) for what, v in UNDECODABLE.items()}
    _, q = _good_jobs_run_first_time(kind, roles, "q1")
    for what, job_id in poison.items():
        dead = q.get_job(job_id)
        assert dead is not None and dead.status == "dead", what
        assert dead.last_error is not None and dead.last_error.startswith("undecodable row: ")
        assert dead.attempts == 1  # claimed once, never handed out


def test_poison_row_claim_batch_hands_out_the_rest_on_both_faces(qs: Any, engine: Engine) -> None:
    """The claim itself (no Worker): the batch's good jobs come back, the bad one is dead."""
    q = qs.queue("q2")
    good = q.enqueue_many([b"a", b"b"])
    bad = _insert(engine, "q2", {"errors": """'[{"attempt": "one"}]'"""})
    more = q.enqueue(b"c")
    handles = q.claim_batch("w", 10)
    assert sorted(h.job.id for h in handles) == sorted([*good, more])
    dead = q.get_job(bad)
    assert dead is not None and dead.status == "dead"
    assert dead.last_error.startswith("undecodable row: ")
    assert dead.errors == ()  # shown, though its history cannot be read
    assert [j.id for j in q.jobs(status="dead")] == [bad]
