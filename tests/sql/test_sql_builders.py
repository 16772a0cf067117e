"""The statement builders (alkstore_sa/_sql): Core expressions, no I/O, values bound.

Each builder is compiled with the PostgreSQL dialect and no engine while
every way to open a connection is made to fail; the SQL text must carry no
value (no quoted string, no number): values travel as bound parameters,
the caller's as ``p_*`` names.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement

from alkstore_sa._db.sql import (
    claim,
    dashboard,
    enqueue,
    flow_claim,
    handle,
    periodic,
    queue_admin,
    queue_wide,
    stats,
    workflow,
    workflow_reads,
)
from alkstore_sa._values.job import LIVE_COLUMNS
from alkstore_sa.schema import jobs

DIALECT = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]

# The stamps every enqueue statement binds, besides its payload(s).
ENQUEUE_STAMPS = {
    "p_queue",
    "p_priority",
    "p_run_at",
    "p_delay",
    "p_max_attempts",
    "p_visibility_timeout",
    "p_expires_in",
    "p_channel",
}

# The parameters each builder expects from its caller (_ops.py), by name.
EXPECTED: dict[str, set[str]] = {
    "claim.claim": {"p_queue", "p_worker_id", "p_n"},
    "claim.claim_walk": {"p_queue", "p_worker_id", "p_n"},
    "claim.claim_bounded": {"p_queue", "p_worker_id", "p_n", "p_max_bytes"},
    "claim.claim_walk_bounded": {"p_queue", "p_worker_id", "p_n", "p_max_bytes"},
    "claim.park": {"p_queue", "p_limit"},
    "enqueue.enqueue": {*ENQUEUE_STAMPS, "p_payloads"},
    "enqueue.enqueue_one": {*ENQUEUE_STAMPS, "p_payload"},
    "enqueue.enqueue_traced": {*ENQUEUE_STAMPS, "p_payloads", "p_trace_context"},
    "enqueue.enqueue_one_traced": {*ENQUEUE_STAMPS, "p_payload", "p_trace_context"},
    "enqueue.enqueue_keyed": {*ENQUEUE_STAMPS, "p_payloads", "p_unique_keys"},
    "enqueue.enqueue_one_keyed": {*ENQUEUE_STAMPS, "p_payload", "p_unique_key"},
    "enqueue.enqueue_keyed_traced": {
        *ENQUEUE_STAMPS,
        "p_payloads",
        "p_unique_keys",
        "p_trace_context",
    },
    "enqueue.enqueue_one_keyed_traced": {
        *ENQUEUE_STAMPS,
        "p_payload",
        "p_unique_key",
        "p_trace_context",
    },
    "enqueue.live_keys": {"p_queue", "p_unique_keys"},
    "handle.ack": {"p_job_id", "p_attempts"},
    "handle.ack_kept": {"p_job_id", "p_attempts", "p_result", "p_done_channel"},
    "handle.snooze": {"p_job_id", "p_attempts", "p_delay"},
    "handle.bury_undecodable": {"p_job_id", "p_worker_id", "p_error"},
    "handle.heartbeat": {"p_job_id", "p_attempts", "p_extend"},
    "handle.retry": {
        "p_job_id",
        "p_attempts",
        "p_delay",
        "p_error",
        "p_traceback",
        "p_done_channel",
    },
    "handle.fail": {"p_job_id", "p_attempts", "p_error", "p_traceback", "p_done_channel"},
    "handle.release": {"p_job_id", "p_attempts"},
    "handle.ack_held": {"p_job_ids", "p_attempts_list"},
    "handle.heartbeat_held": {"p_job_ids", "p_attempts_list"},
    "handle.still_there": {"p_job_ids"},
    "queue_wide.ack_batch": {"p_queue", "p_job_ids", "p_done_channel"},
    "queue_wide.ack_batch_unkept": {"p_queue", "p_job_ids"},
    "queue_wide.cancel": {"p_queue", "p_job_id", "p_control_channel"},
    "queue_wide.purge_completed": {"p_queue"},
    "queue_wide.get_job": {"p_queue", "p_job_id"},
    "queue_wide.bury_lapsed": {"p_queue"},
    "queue_wide.bury_expired": {"p_queue"},
    "queue_wide.purge_dead": {"p_queue", "p_retention"},
    "queue_wide.schema_probe": set(),
    "queue_admin.list_jobs": {"p_queue", "p_status", "p_before", "p_limit"},
    "queue_admin.requeue_dead_oldest": {"p_queue", "p_limit", "p_channel"},
    "queue_admin.requeue_dead_ids": {"p_queue", "p_limit", "p_channel", "p_job_ids"},
    "queue_admin.purge_dead_all": {"p_queue"},
    "queue_admin.purge_dead_ids": {"p_queue", "p_job_ids", "p_older_than"},
    "queue_admin.pause": {"p_queue"},
    "queue_admin.resume": {"p_queue", "p_channel"},
    "stats.stats": {"p_queue"},
    "stats.queue_names": set(),
    "stats.stats_all": set(),
    "stats.stats_listed": set(),
    "dashboard.set_statement_timeout": {"p_timeout"},
    "dashboard.dead_groups": {"p_queue", "p_limit"},
    "dashboard.dead_ids_oldest": {"p_queue", "p_limit"},
    "dashboard.dead_ids_of_group": {"p_queue", "p_limit", "p_error"},
    "dashboard.dead_ids_of_typed_group": {"p_queue", "p_limit", "p_error", "p_error_type"},
    "dashboard.dead_page_of_group": {"p_queue", "p_limit", "p_error", "p_before"},
    "dashboard.dead_page_of_typed_group": {
        "p_queue",
        "p_limit",
        "p_error",
        "p_error_type",
        "p_before",
    },
    "dashboard.due_page": {"p_queue", "p_limit", "p_before"},
    "dashboard.scheduled_page": {"p_queue", "p_limit", "p_before"},
    "dashboard.in_flight_summary": {"p_limit"},
    "dashboard.in_flight": {"p_limit"},
    "dashboard.throughput_all": set(),
    "dashboard.throughput_of_queue": {"p_queue"},
    "periodic.first_sight": {"p_name", "p_slot"},
    "periodic.advance": {"p_name", "p_slot"},
    "periodic.last_slots": set(),
    "workflow.draw_ids": {"p_name", "p_jobs_table", "p_n"},
    "workflow.insert_steps": {
        "p_workflow_id",
        "p_ids",
        "p_queues",
        "p_channels",
        "p_payloads",
        "p_prioritys",
        "p_run_ats",
        "p_delays",
        "p_max_attemptss",
        "p_visibility_timeouts",
        "p_expires_ins",
        "p_unique_keys",
        "p_keep_completeds",
        "p_grps",
        "p_remainings",
        "p_ups",
        "p_downs",
    },
    "workflow.promote_roots": {"p_workflow_id"},
    "workflow.taken_keys": {"p_queues", "p_unique_keys"},
    "workflow.sweep_finished": {"p_queue"},
    "workflow_reads.waiting_job": {"p_queue", "p_job_id"},
    "workflow_reads.workflow_status": {"p_workflow_id"},
    "workflow_reads.workflow_steps_of": {"p_workflow_id"},
    "workflow_reads.workflow_edges_of": {"p_workflow_id"},
}


def _builders() -> dict[str, Callable[[], Any]]:
    """Every cached, argument-free statement builder the sql modules define."""
    found: dict[str, Callable[[], Any]] = {}
    for mod in (
        claim,
        dashboard,
        enqueue,
        handle,
        periodic,
        queue_admin,
        queue_wide,
        stats,
        workflow,
        workflow_reads,
    ):
        assert isinstance(mod, ModuleType)
        short = mod.__name__.rsplit(".", 1)[1]
        for name, obj in vars(mod).items():
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is not None and getattr(wrapped, "__module__", None) == mod.__name__:
                found[f"{short}.{name}"] = obj
    return found


BUILDERS = _builders()


@pytest.fixture
def no_io(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to reach a server fails loudly."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a statement builder tried to do I/O")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(refuse))
    yield


def test_every_builder_is_pinned_here() -> None:
    # A builder added without a line in EXPECTED fails here, so it gets checked too.
    assert set(BUILDERS) >= set(EXPECTED)
    missing = set(BUILDERS) - set(EXPECTED)
    assert not missing, f"add the new builders to EXPECTED: {sorted(missing)}"


def _compile(stmt: ClauseElement, **kw: Any) -> Any:
    return stmt.compile(dialect=DIALECT, **kw)


# Quoted text, or a number standing alone (not part of a name or a %(param)s).
_QUOTED = re.compile(r"'")
_NUMBER = re.compile(r"(?<![\w.\]])\d+(?:\.\d+)?(?![\w\[])")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builder_compiles_with_no_io_and_binds_every_value(no_io: None, name: str) -> None:
    built = BUILDERS[name].__wrapped__()  # type: ignore[attr-defined]  # uncached: really build
    compiled = _compile(built)
    text = compiled.string
    assert text
    assert not _QUOTED.search(text), f"a quoted literal in {name}: {text}"
    bare = re.sub(r"%\(\w+\)s", "", text)
    assert not _NUMBER.search(bare), f"a number pasted into {name}: {_NUMBER.findall(bare)}"
    params = set(compiled.params)
    assert EXPECTED[name] <= params, f"{name} lacks {EXPECTED[name] - params}"
    # Every other bound value is the builder's own constant, never a caller's.
    caller = {p for p in params if p.startswith("p_")}
    assert caller == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builder_is_built_once(name: str) -> None:
    assert BUILDERS[name]() is BUILDERS[name]()


# Builders that name no table (so no schema to map).
NO_TABLE = {"dashboard.set_statement_timeout"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builder_maps_to_any_schema(name: str) -> None:
    if name in NO_TABLE:
        assert "alkstore." not in _compile(BUILDERS[name]()).string
        return
    compiled = _compile(
        BUILDERS[name](),
        schema_translate_map={"alkstore": "tenant_b"},
        render_schema_translate=True,
    )
    tables = (
        "jobs",
        "dead_jobs",
        "paused_queues",
        "periodic",
        "throughput",
        "completed_jobs",
        "workflows",
        "workflow_steps",
        "workflow_edges",
    )
    assert any(f"tenant_b.{table}" in compiled.string for table in tables)
    assert "alkstore." not in compiled.string


def test_builder_constants_travel_as_parameters() -> None:
    texts = " ".join(_compile(b()).string for b in BUILDERS.values())
    for value in ("max attempts exceeded", "expired", "failed", "pending", "processing"):
        assert value not in texts
    retry = _compile(handle.retry())
    assert "max attempts exceeded" in retry.params.values()
    assert "failed" in _compile(handle.fail()).params.values()
    assert "expired" in _compile(queue_wide.bury_expired()).params.values()


# PostgreSQL 18+, and before (_ops._claim_statement); each also under a byte bound.
CLAIMS = [claim.claim, claim.claim_walk, claim.claim_bounded, claim.claim_walk_bounded]


@pytest.mark.parametrize("build", CLAIMS)
def test_claim_is_one_statement_skipping_locked_rows(build: Callable[[], Any]) -> None:
    text = _compile(build()).string
    assert text.count("FOR UPDATE SKIP LOCKED") == 3  # the burial, due, and lapsed rows
    assert "UPDATE alkstore.jobs SET" in text and "RETURNING" in text
    assert "INSERT INTO alkstore.dead_jobs" in text  # Q12 burial in the same round trip
    assert "statement_timestamp()" in text and "now()" not in text


# Every claim: the unlimited ones (both forms) and the limited ones.
EVERY_CLAIM = [
    *CLAIMS,
    lambda: flow_claim.claim_limited(),
    lambda: flow_claim.claim_concurrency(),
]


@pytest.mark.parametrize("build", EVERY_CLAIM)
def test_s3_claims_take_unparked_rows_and_write_no_time_key(build: Callable[[], Any]) -> None:
    # Parked rows lie after their level's others in jobs_claim_ix (revision
    # 0016): every scan of due rows names NOT parked, and the UPDATE writes no
    # column of the index's order (priority, parked, run_at).
    text = _compile(build()).string
    head, update = text.split("UPDATE alkstore.jobs SET status=", 1)
    assert "NOT alkstore.jobs.parked" in head
    assert "claim_at" not in text
    assert not any(f"{c}=" in update for c in ("parked", "run_at", "priority"))


@pytest.mark.parametrize("build", CLAIMS)
def test_o4_every_row_source_of_the_claim_checks_the_pause(build: Callable[[], Any]) -> None:
    text = _compile(build()).string
    # Both row sources stop at a pause of this queue: the one scan of lapsed
    # rows (which the burial and the reclaim take theirs from) and the due
    # rows (the scan, or the walk's first step).
    gate = "NOT (EXISTS (SELECT alkstore.paused_queues.queue \nFROM alkstore.paused_queues"
    assert text.count(gate) == 2
    assert text.count("alkstore.paused_queues.queue = %(p_queue)s") == 2
    lapsed_rows = text[text.index("lapsed_rows AS") : text.index("exhausted_moved AS")]
    assert gate in lapsed_rows
    if build in (claim.claim_walk, claim.claim_walk_bounded):
        due = text[text.index("walk(p, ids, found) AS") : text.index("UNION ALL")]
    else:
        due = text[text.index("due AS") : text.index("lapsed AS")]
    assert gate in due
    # sweep_expired()'s burial does not wait for a resume.
    assert "paused_queues" not in _compile(queue_wide.bury_lapsed()).string


def test_o2_requeue_is_one_statement_with_one_notify() -> None:
    for builder in (queue_admin.requeue_dead_oldest, queue_admin.requeue_dead_ids):
        text = _compile(builder()).string
        assert text.count("DELETE FROM alkstore.dead_jobs") == 1
        assert text.count("INSERT INTO alkstore.jobs") == 1
        assert text.count("pg_notify") == 1
        assert "FOR UPDATE SKIP LOCKED" in text


def test_o5_stats_reads_each_status_apart() -> None:
    text = _compile(stats.stats()).string
    assert text.count("FROM alkstore.jobs") == 2  # pending and processing, each by its index
    assert text.count("FROM alkstore.dead_jobs") == 1
    assert text.count("alkstore.jobs.status = ") == 2


def test_enqueue_is_one_insert_with_one_notify() -> None:
    text = _compile(enqueue.enqueue()).string
    assert text.count("pg_notify") == 1
    assert text.count("INSERT INTO alkstore.jobs") == 1
    assert "unnest" in text  # one statement for any number of payloads


def test_enqueue_one_is_the_same_insert_without_the_array() -> None:
    many = _compile(enqueue.enqueue()).string
    one = _compile(enqueue.enqueue_one()).string
    assert one.count("pg_notify") == 1
    assert one.count("INSERT INTO alkstore.jobs") == 1
    assert "unnest" not in one
    # Same columns, stamped by the same expressions.
    columns = many[many.index("INSERT") : many.index("%(p_queue)s")]
    stamps = many[many.index("%(p_priority)s") : many.index("FROM unnest")].strip()
    assert columns in one and stamps in one


def test_b3_traced_enqueue_is_the_same_insert_plus_the_carrier() -> None:
    for plain, traced in (
        (enqueue.enqueue(), enqueue.enqueue_traced()),
        (enqueue.enqueue_one(), enqueue.enqueue_one_traced()),
    ):
        p, t = _compile(plain).string, _compile(traced).string
        assert "trace_context" not in p
        assert t.replace(", trace_context)", ")").replace(
            ", %(p_trace_context)s::JSONB AS anon_7", ""
        ) == p.replace("anon_7", "anon_7")


def test_time_is_the_statements_clock_everywhere() -> None:
    for name, builder in BUILDERS.items():
        text = _compile(builder()).string
        assert "now()" not in text and "CURRENT_TIMESTAMP" not in text.upper(), name
        assert "transaction_timestamp" not in text, name


def test_rows_read_by_position_come_in_live_column_order() -> None:
    # ops builds Job values from these rows by position (Job.from_live).
    for build in CLAIMS:
        assert tuple(c.name for c in build().exported_columns) == LIVE_COLUMNS
    extras = ("died_at", "result", "finished_at")
    # G1: get_job's rows end with waiting_on (a waiting step's upstreams not acked).
    got = tuple(queue_wide.get_job().selected_columns.keys())
    assert got == (*LIVE_COLUMNS, *extras, "waiting_on")
    # jobs.* is the live columns plus internal ones never read back: deadline_floor
    # (H1) and parked (S3).
    internal = {"deadline_floor", "parked"}
    assert tuple(c.name for c in jobs.c if c.name not in internal) == LIVE_COLUMNS


@pytest.mark.parametrize("one", [True, False])
@pytest.mark.parametrize("keyed", [True, False])
@pytest.mark.parametrize("traced", [True, False])
def test_r1_kept_enqueue_variants_bind_the_stamp(one: bool, keyed: bool, traced: bool) -> None:
    stmt = enqueue.enqueue_kept(one=one, keyed=keyed, traced=traced)
    names = {name for name in _compile(stmt).params if name.startswith("p_")}
    expected = {*ENQUEUE_STAMPS, "p_keep_completed", "p_payload" if one else "p_payloads"}
    if keyed:
        expected.add("p_unique_key" if one else "p_unique_keys")
    if traced:
        expected.add("p_trace_context")
    assert names == expected
