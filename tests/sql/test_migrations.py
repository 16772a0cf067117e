"""M1, M2, M4 (migrations) and the bad-URL rule, against a real PostgreSQL.

The command-line tests run ``alembic`` as a user would: a subprocess from the
repository root whose environment holds only ``PATH`` and the variables the
rule names, so nothing from the test process leaks in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Column, Connection, Engine, create_engine, text
from sqlalchemy.dialects.postgresql import DOMAIN
from sqlalchemy.schema import CreateSchema

import alkstore_sa.migrations
from alkstore_sa import EnqueueOpts, InvalidNameError, QueueOpts, Store
from alkstore_sa.migrations import VERSION_TABLE
from alkstore_sa.migrations._config import alembic_config
from alkstore_sa.schema import DEFAULT_SCHEMA, metadata

from ..conftest import ROOT

BIN = Path(sys.executable).parent
# What the version table leaves behind when it stays: itself, its primary key
# index (Alembic names it <table>_pkc) and its row and array types.
VERSION_TABLE_OBJECTS = {
    ("table", VERSION_TABLE),
    ("index", f"{VERSION_TABLE}_pkc"),
    ("type", VERSION_TABLE),
    ("type", f"_{VERSION_TABLE}"),
}
OUR_TABLES = {t.name for t in metadata.tables.values()}


def url_text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def alembic_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``alembic ARGS`` from the repository root with a bare environment."""
    bare = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    return subprocess.run(
        ["alembic", *args],
        cwd=ROOT,
        env=bare,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@contextmanager
def connect(url: URL) -> Iterator[Connection]:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            yield conn
    finally:
        eng.dispose()


# Every object a migration could make, in every schema that is not PostgreSQL's own.
_OBJECTS = text(
    """
    WITH ns AS (
        SELECT oid, nspname FROM pg_namespace
        WHERE nspname NOT IN ('pg_catalog', 'information_schema')
          AND nspname NOT LIKE 'pg\\_toast%' AND nspname NOT LIKE 'pg\\_temp\\_%'
    )
    SELECT ns.nspname, 'schema', ns.nspname FROM ns
    UNION ALL
    SELECT ns.nspname,
           CASE c.relkind WHEN 'r' THEN 'table' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence'
                          WHEN 'v' THEN 'view' WHEN 'm' THEN 'matview' ELSE c.relkind::text END,
           c.relname
    FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
    UNION ALL
    SELECT ns.nspname, 'function', p.proname FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace
    UNION ALL
    SELECT ns.nspname, 'type', t.typname FROM pg_type t JOIN ns ON ns.oid = t.typnamespace
    UNION ALL
    SELECT ns.nspname, 'trigger', tg.tgname FROM pg_trigger tg
        JOIN pg_class c ON c.oid = tg.tgrelid JOIN ns ON ns.oid = c.relnamespace
    UNION ALL
    SELECT '', 'extension', extname FROM pg_extension
    """
)


def objects(url: URL) -> set[tuple[str, str, str]]:
    with connect(url) as conn:
        return {(r[0], r[1], r[2]) for r in conn.execute(_OBJECTS)}


def tables_in(url: URL, schema: str) -> set[str]:
    with connect(url) as conn:
        rows = conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
        )
        return {r[0] for r in rows}


# --- M1 ----------------------------------------------------------------------


def test_m1_upgrade_downgrade_upgrade_from_repo_root(blank_database: URL) -> None:
    env = {"ALKSTORE_DATABASE_URL": url_text(blank_database)}
    before = objects(blank_database)

    ok(alembic_cli("upgrade", "head", env=env))
    installed = objects(blank_database) - before
    made = {(kind, name) for schema, kind, name in installed if schema == DEFAULT_SCHEMA}
    # Not vacuous: the catalog query sees what the upgrade made.
    assert {("table", "jobs"), ("table", "dead_jobs"), ("sequence", "jobs_id_seq")} <= made
    assert ("index", "jobs_claim_ix") in made
    assert all(schema == DEFAULT_SCHEMA for schema, _, _ in installed)
    heads = ScriptDirectory.from_config(alembic_config(url=blank_database)).get_heads()
    assert ok(alembic_cli("current", env=env)).stdout.split()[0] == heads[0]

    ok(alembic_cli("downgrade", "base", env=env))
    left = objects(blank_database) - before
    # Only our schema and the version table may stay.
    assert left <= {(DEFAULT_SCHEMA, "schema", DEFAULT_SCHEMA)} | {
        (DEFAULT_SCHEMA, kind, name) for kind, name in VERSION_TABLE_OBJECTS
    }, sorted(left)
    assert ok(alembic_cli("current", env=env)).stdout.strip() == ""

    ok(alembic_cli("upgrade", "head", env=env))
    assert objects(blank_database) - before == installed


def test_m1_alembic_ini_runs_the_packages_own_environment() -> None:
    """The repository's alembic.ini and alembic_config() (the CLI's, the bench's and
    this suite's) name the same environment: the package's, with no copy of it."""
    package_dir = Path(alkstore_sa.migrations.__file__).parent
    from_ini = ScriptDirectory.from_config(Config(str(ROOT / "alembic.ini")))
    from_code = ScriptDirectory.from_config(alembic_config())
    assert Path(from_ini.dir).resolve() == Path(from_code.dir).resolve() == package_dir
    assert from_ini.get_heads() == from_code.get_heads()
    assert from_code.get_revision("alkstore@head") is not None  # the branch label


# The columns 0001 created: what every later revision must keep as it was.
_COLUMNS_0001 = (
    "id, queue, payload, priority, run_at, attempts, max_attempts, visibility_timeout,"
    " expires_at, worker_id, claim_deadline, created_at, last_error"
)
_ROWS = {
    "jobs": text(f"SELECT {_COLUMNS_0001}, status FROM alkstore.jobs ORDER BY id"),
    "dead_jobs": text(f"SELECT {_COLUMNS_0001}, died_at FROM alkstore.dead_jobs ORDER BY id"),
}


def _every_job(url: URL) -> dict[str, list[dict[str, Any]]]:
    with connect(url) as conn:
        return {t: [dict(r) for r in conn.execute(q).mappings()] for t, q in _ROWS.items()}


def test_m1_upgrade_from_0001_keeps_every_job_and_so_does_the_way_back(
    blank_database: URL,
) -> None:
    """0002 (paused_queues, O4) and 0003 (errors, trace_context; B2, B3) on a store in
    use: pending, processing and dead rows stay, up and down."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0001")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                """
                INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,
                    visibility_timeout, expires_at, priority)
                SELECT 'm', decode(lpad(g::text, 4, '0'), 'hex'), statement_timestamp(), 5,
                       interval '30 s', statement_timestamp() + interval '1 day', g % 3
                FROM generate_series(1, 50) AS g
                """
            )
        )
        conn.execute(
            text(
                "UPDATE alkstore.jobs SET status = 'processing', attempts = 1, worker_id = 'w',"
                " claim_deadline = statement_timestamp() + interval '30 s' WHERE id % 5 = 0"
            )
        )
        conn.execute(
            text(
                """
                WITH moved AS (DELETE FROM alkstore.jobs WHERE id % 7 = 0 RETURNING *)
                INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,
                    max_attempts, visibility_timeout, expires_at, worker_id, claim_deadline,
                    created_at, last_error, died_at)
                SELECT id, queue, payload, priority, run_at, attempts, max_attempts,
                       visibility_timeout, expires_at, worker_id, claim_deadline, created_at,
                       'boom', statement_timestamp() FROM moved
                """
            )
        )
        conn.commit()
    before = _every_job(blank_database)
    statuses = {r["status"] for r in before["jobs"]}
    assert statuses == {"pending", "processing"} and len(before["dead_jobs"]) == 7

    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
    assert tables_in(blank_database, DEFAULT_SCHEMA) == OUR_TABLES | {VERSION_TABLE}
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("m")
            assert q.pause() is True  # the new table in use
            command.downgrade(cfg, "alkstore_0001")
            assert _every_job(blank_database) == before
            assert "paused_queues" not in tables_in(blank_database, DEFAULT_SCHEMA)
            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == before
            # A pause does not survive a downgrade (its table went); the jobs do.
            assert q.stats().paused is False
            handle = q.claim_one("w2")
            assert handle is not None and handle.job.status == "processing"
            assert q.requeue_dead() == 7
            assert q.stats().dead == 0
    finally:
        eng.dispose()


def test_m1_b2_upgrade_starts_each_history_with_the_last_error(blank_database: URL) -> None:
    """0003 gives a job that already failed a one-entry history, so its last
    entry's error equals last_error (B2) for jobs older than the upgrade too."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0002")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, attempts, last_error) VALUES"
                " ('m', '\\x01', now(), 5, interval '30 s', 2, 'flaky'),"
                " ('m', '\\x02', now(), 5, interval '30 s', 0, NULL)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
                " max_attempts, visibility_timeout, created_at, last_error, died_at) VALUES"
                " (99, 'm', '\\x03', 0, now(), 5, 5, interval '30 s', now(), 'gave up',"
                " timestamptz '2026-01-02 03:04:05+00')"
            )
        )
        conn.commit()
    command.upgrade(cfg, "head")  # through 0003 (and what came after, which the Store reads)
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("m")
            flaky, fresh = q.jobs(status="pending")[::-1]
            assert [(e.attempt, e.error, e.traceback) for e in flaky.errors] == [(2, "flaky", None)]
            assert fresh.errors == ()
            (dead,) = q.jobs(status="dead")
            assert [(e.attempt, e.error) for e in dead.errors] == [(5, "gave up")]
            assert dead.errors[0].at == dead.died_at
    finally:
        eng.dispose()


def test_m1_u1_unique_keys_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    """0004 (unique_key, U1) on a store in use: jobs enqueued under 0003 stay
    and have no key; down again, keyed jobs stay as plain jobs; up again works."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0003")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout) SELECT 'm', decode(lpad(g::text, 4, '0'), 'hex'),"
                " statement_timestamp(), 5, interval '30 s' FROM generate_series(1, 20) AS g"
            )
        )
        conn.execute(
            text(
                "INSERT INTO alkstore.dead_jobs (id, queue, payload, priority, run_at, attempts,"
                " max_attempts, visibility_timeout, created_at, last_error, died_at) VALUES"
                " (999, 'm', '\\x03', 0, now(), 5, 5, interval '30 s', now(), 'gave up', now())"
            )
        )
        conn.commit()
    before = _every_job(blank_database)

    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("m")
            assert {j.unique_key for j in q.jobs(limit=1000)} == {None}
            keyed = q.enqueue(b"k", EnqueueOpts(unique_key="k"))
            assert q.enqueue(b"k2", EnqueueOpts(unique_key="k")) == keyed
            with_keyed = _every_job(blank_database)

            command.downgrade(cfg, "alkstore_0003")
            assert _every_job(blank_database) == with_keyed  # the keyed job stays, keyless
            with connect(blank_database) as conn:
                left = conn.execute(
                    text(
                        "SELECT count(*) FROM information_schema.columns"
                        " WHERE table_schema = 'alkstore' AND column_name = 'unique_key'"
                    )
                ).scalar()
                indexes = conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE schemaname = 'alkstore'")
                ).scalars()
                assert left == 0 and "jobs_queue_unique_key_ix" not in set(indexes)

            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == with_keyed
            again = q.enqueue(b"k3", EnqueueOpts(unique_key="k"))
            assert again != keyed  # the key went with the column: a new job
            assert q.enqueue(b"k4", EnqueueOpts(unique_key="k")) == again
            assert q.requeue_dead() == 1
    finally:
        eng.dispose()


def test_hot_heartbeats_upgrade_gives_claims_in_flight_a_floor_so_their_lapse_is_seen(
    blank_database: URL,
) -> None:
    """0007 backfills deadline_floor from claim_deadline: a claim that was in
    flight at the upgrade and then lapsed is reclaimed (Q11), not stranded."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0004_unique_keys")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, status, attempts, worker_id, claim_deadline) VALUES"
                " ('m', '\\x01', now(), 5, interval '30 s', 'processing', 1, 'gone',"
                " now() - interval '1 s')"
            )
        )
        conn.commit()
    command.upgrade(cfg, "head")
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            handle = store.queue("m").claim_one("w2")
            assert handle is not None and handle.job.attempts == 2
    finally:
        eng.dispose()


def test_parking_parked_expired_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    """0008 (parked, claim_at; S3) on a store in use, parked rows included."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0007_hot_heartbeats")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, expires_at, priority) SELECT 'm', '\\x01',"
                " statement_timestamp() - g * interval '1 s', 5, interval '30 s',"
                " CASE WHEN g % 2 = 0 THEN statement_timestamp() - interval '1 s' END, g % 3"
                " FROM generate_series(1, 20) AS g"
            )
        )
        conn.commit()
    before = _every_job(blank_database)
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("m")
            assert len(q.claim_batch("w", 3)) == 3  # and parks the ten expired rows
            with connect(blank_database) as conn:
                parked = conn.execute(text("SELECT count(*) FROM alkstore.jobs WHERE parked"))
                assert parked.scalar_one() == 10
            claimed = _every_job(blank_database)
            command.downgrade(cfg, "alkstore_0007_hot_heartbeats")
            assert _every_job(blank_database) == claimed
            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == claimed
            with connect(blank_database) as conn:
                parked = conn.execute(text("SELECT count(*) FROM alkstore.jobs WHERE parked"))
                assert parked.scalar_one() == 0  # nothing starts parked
            assert q.sweep_expired().expired == 10
            assert len(q.claim_batch("w", 10)) == 7
    finally:
        eng.dispose()


def test_v1_workers_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    """0010 (the registry of workers, V1) on a store in use, claims in flight included."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0009_row_checks")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, priority) SELECT 'm', '\\x01',"
                " statement_timestamp() - g * interval '1 s', 5, interval '30 s', g % 3"
                " FROM generate_series(1, 10) AS g"
            )
        )
        conn.commit()
    command.upgrade(cfg, "head")
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            q = store.queue("m")
            held = q.claim_batch("w", 3)
            assert len(held) == 3
            with connect(blank_database) as conn:
                conn.execute(
                    text(
                        "INSERT INTO alkstore.workers (worker_id, hostname, pid, queues,"
                        " concurrency, version) VALUES ('w', 'h', 1, ARRAY['m'], 3, '0')"
                    )
                )
                conn.commit()
            assert [w.in_flight for w in store.workers()] == [tuple(sorted(h.job.id for h in held))]
            claimed = _every_job(blank_database)
            command.downgrade(cfg, "alkstore_0009_row_checks")
            assert "workers" not in tables_in(blank_database, "alkstore")
            assert _every_job(blank_database) == claimed
            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == claimed
            assert store.workers() == []  # the registrations went with the table
            assert all(h.ack() for h in held)  # the claims survived both ways
    finally:
        eng.dispose()


# --- M2 ----------------------------------------------------------------------


def _only_schema(schema: str) -> Callable[[str | None, str, object], bool]:
    def include_name(name: str | None, type_: str, parent_names: object) -> bool:
        return name == schema if type_ == "schema" else True

    return include_name


def _domain_as_its_base(
    context: MigrationContext,
    inspected_column: Column[Any],
    metadata_column: Column[Any],
    inspected_type: Any,
    metadata_type: Any,
) -> bool | None:
    """A column on one of 0015's domains compares as the domain's base type: the
    MetaData types the columns as what statements need (see ``schema.py``)."""
    if isinstance(inspected_type, DOMAIN):
        base = Column(inspected_column.name, inspected_type.data_type)
        return bool(context.impl.compare_type(base, metadata_column))
    return None  # Alembic's own comparison


def _diff_with_metadata(engine: Engine, **extra_opts: Any) -> list[Any]:
    """Alembic's compare_metadata over our schema only (not our version table)."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "include_name": _only_schema(DEFAULT_SCHEMA),
                "version_table": VERSION_TABLE,
                "version_table_schema": DEFAULT_SCHEMA,
                "compare_type": _domain_as_its_base,
                **extra_opts,
            },
        )
        return list(compare_metadata(ctx, metadata))


def test_m2_compare_metadata_finds_no_difference(engine: Engine) -> None:
    diff = _diff_with_metadata(engine, compare_server_default=True)
    assert diff == []


def test_m2_compare_metadata_sees_a_changed_type_behind_a_domain(engine: Engine) -> None:
    """The domain-aware comparison still reports a domain whose base type differs."""
    with engine.begin() as conn:
        conn.execute(text("CREATE DOMAIN alkstore.odd_history AS text"))
        conn.execute(
            text(
                "ALTER TABLE alkstore.jobs ALTER COLUMN errors"
                " TYPE alkstore.odd_history USING errors::text"
            )
        )
    diff = _diff_with_metadata(engine)
    assert [(d[0][0], d[0][3]) for d in diff] == [("modify_type", "errors")]


def test_m2_compare_metadata_sees_a_difference(engine: Engine) -> None:
    """The comparison above can fail: drop an index and it reports it."""
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX alkstore.jobs_expiry_ix"))
    diff = _diff_with_metadata(engine)
    assert [d[0] for d in diff] == ["add_index"]


# compare_metadata does not look at check constraints, partial-index predicates
# or identity columns; the catalog does.  The expected side is what
# metadata.create_all() makes in a scratch schema of the same database.
_CATALOG = {
    "columns": text(
        """
        SELECT table_name, column_name,
               -- the column's place among the table's columns: a column a
               -- revision dropped (0016's claim_at) leaves a gap in the numbers
               rank() OVER (PARTITION BY table_name ORDER BY ordinal_position),
               data_type, is_nullable, column_default, is_identity, identity_generation
        FROM information_schema.columns WHERE table_schema = :s
        """
    ),
    "constraints": text(
        """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s
        """
    ),
    "indexes": text(
        """
        SELECT tablename, indexname, replace(indexdef, :s || '.', 'SCHEMA.')
        FROM pg_indexes WHERE schemaname = :s
        """
    ),
    "relations": text(
        """
        SELECT c.relname, c.relkind FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s
        """
    ),
}


def _catalog(conn: Connection, schema: str) -> dict[str, set[tuple[object, ...]]]:
    found = {
        what: {tuple(r) for r in conn.execute(q, {"s": schema})} for what, q in _CATALOG.items()
    }
    # The version table belongs to the migrations, not to the MetaData.
    found["columns"] = {r for r in found["columns"] if r[0] != VERSION_TABLE}
    found["constraints"] = {r for r in found["constraints"] if r[0] != VERSION_TABLE}
    found["indexes"] = {r for r in found["indexes"] if r[0] != VERSION_TABLE}
    found["relations"] = {r for r in found["relations"] if not str(r[0]).startswith(VERSION_TABLE)}
    return found


def test_m2_catalog_matches_metadata_create_all(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(CreateSchema("m2_expected"))
        metadata.create_all(
            conn.execution_options(schema_translate_map={DEFAULT_SCHEMA: "m2_expected"})
        )
    with engine.connect() as conn:
        migrated = _catalog(conn, DEFAULT_SCHEMA)
        expected = _catalog(conn, "m2_expected")
    assert any("WHERE (status = 'pending'::text)" in str(r[2]) for r in migrated["indexes"])
    assert len(migrated["constraints"]) >= 7
    for what in _CATALOG:
        assert migrated[what] == expected[what], what


# --- M4 ----------------------------------------------------------------------


def test_m4_x_argument_installs_into_named_schema(blank_database: URL) -> None:
    env = {"ALKSTORE_DATABASE_URL": url_text(blank_database)}
    ok(alembic_cli("-x", "alkstore_schema=other", "upgrade", "head", env=env))
    assert tables_in(blank_database, "other") == OUR_TABLES | {VERSION_TABLE}
    assert tables_in(blank_database, DEFAULT_SCHEMA) == set()
    ok(alembic_cli("-x", "alkstore_schema=other", "downgrade", "base", env=env))
    assert tables_in(blank_database, "other") == {VERSION_TABLE}


def test_m4_env_var_installs_into_named_schema(blank_database: URL) -> None:
    env = {"ALKSTORE_DATABASE_URL": url_text(blank_database), "ALKSTORE_SCHEMA": "other"}
    ok(alembic_cli("upgrade", "head", env=env))
    assert tables_in(blank_database, "other") == OUR_TABLES | {VERSION_TABLE}
    assert tables_in(blank_database, DEFAULT_SCHEMA) == set()


def test_m4_x_argument_wins_over_env_var(blank_database: URL) -> None:
    env = {"ALKSTORE_DATABASE_URL": url_text(blank_database), "ALKSTORE_SCHEMA": "from_env"}
    ok(alembic_cli("-x", "alkstore_schema=from_x", "upgrade", "head", env=env))
    assert tables_in(blank_database, "from_x") == OUR_TABLES | {VERSION_TABLE}
    assert tables_in(blank_database, "from_env") == set()


@pytest.mark.parametrize("how", ["x", "env"])
@pytest.mark.parametrize("bad", ["bad-name", "pg_mine", "1st", "drop table x"])
def test_m4_invalid_schema_name_is_a_clear_error(blank_database: URL, how: str, bad: str) -> None:
    env = {"ALKSTORE_DATABASE_URL": url_text(blank_database)}
    args = ["upgrade", "head"]
    if how == "x":
        args = ["-x", f"alkstore_schema={bad}", *args]
    else:
        env["ALKSTORE_SCHEMA"] = bad
    proc = alembic_cli(*args, env=env)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert repr(bad) in err and "schema" in err
    with connect(blank_database) as conn:
        made = conn.execute(
            text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"), {"s": bad}
        ).scalar()
    assert made == 0


@pytest.mark.parametrize("bad", ["bad-name", "", "pg_x", "a" * 64, "a b"])
def test_m4_invalid_schema_name_refused_by_store(engine: Engine, bad: str) -> None:
    with pytest.raises(InvalidNameError):
        Store(engine, schema=bad)


@pytest.fixture
def two_schema_url(blank_database: URL) -> URL:
    for schema in ("a", "b"):
        command.upgrade(alembic_config(url=blank_database, schema=schema), "head")
    return blank_database


def test_m4_two_schemas_are_independent_stores(two_schema_url: URL) -> None:
    eng = create_engine(two_schema_url)
    try:
        with Store(eng, schema="a") as sa, Store(eng, schema="b") as sb:
            qa, qb = sa.queue("emails"), sb.queue("emails")
            job_id = qa.enqueue(b"only in a")
            assert qb.claim_one("w") is None
            assert qb.cancel(job_id) is False
            assert qb.sweep_expired().expired == 0
            handle = qa.claim_one("w")
            assert handle is not None and handle.id == job_id and handle.payload == b"only in a"
            assert handle.ack() is True
            # Each schema numbers its own jobs.
            assert qb.enqueue(b"b's own") == job_id
            assert qa.get_job(job_id) is None
    finally:
        eng.dispose()


def test_m4_two_schemas_have_different_channels(two_schema_url: URL) -> None:
    eng = create_engine(two_schema_url)
    try:
        with Store(eng, schema="a") as sa, Store(eng, schema="b") as sb:
            assert sa.queue("emails").channel != sb.queue("emails").channel
            long = "q" * 63
            assert sa.queue(long).channel != sb.queue(long).channel
    finally:
        eng.dispose()


# --- Bad input: ALKSTORE_DATABASE_URL ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(None, id="unset"),
        pytest.param("", id="empty"),
        pytest.param("not a url", id="malformed"),
        pytest.param("mysql://u@localhost/db", id="not-postgres"),
        pytest.param("postgresql+psycopg://u@localhost:abc/db", id="bad-port"),
        pytest.param("postgresql+nodriver://u@localhost/db", id="unknown-driver"),
        pytest.param("postgresql+psycopg://nobody@127.0.0.1:1/nowhere", id="unreachable"),
        pytest.param("postgresql+psycopg://nobody@/nowhere?host=/nonexistent-dir", id="no-socket"),
    ],
)
def test_bad_database_url_is_one_line_naming_the_variable(url: str | None) -> None:
    env = {} if url is None else {"ALKSTORE_DATABASE_URL": url}
    proc = alembic_cli("upgrade", "head", env=env)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert "ALKSTORE_DATABASE_URL" in err


def test_r1_completed_jobs_revision_keeps_every_job_up_and_down(blank_database: URL) -> None:
    """0011 (keep_completed, completed_jobs; R1) on a store in use: live and dead rows stay."""
    cfg = alembic_config(url=blank_database)
    command.upgrade(cfg, "alkstore_0010_workers")
    with connect(blank_database) as conn:
        conn.execute(
            text(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                " visibility_timeout, priority) SELECT 'm', '\\x01',"
                " statement_timestamp() - g * interval '1 s', 5, interval '30 s', g % 3"
                " FROM generate_series(1, 10) AS g"
            )
        )
        conn.commit()
    before = _every_job(blank_database)
    command.upgrade(cfg, "head")
    assert _every_job(blank_database) == before
    eng = create_engine(blank_database)
    try:
        with Store(eng) as store:
            old = store.queue("m")
            [h] = old.claim_batch("w", 1)
            assert h.job.keep_completed is None  # jobs from before the upgrade: no stamp
            assert h.ack(b"ignored") is True
            assert old.get_job(h.id) is None
            kept_q = store.queue("m", QueueOpts(keep_completed=60))
            kept_id = kept_q.enqueue(b"k", EnqueueOpts(priority=100))
            [k] = kept_q.claim_batch("w", 1)
            assert k.id == kept_id and k.ack(b"r") is True
            assert kept_q.get_job(kept_id).status == "completed"
            live = _every_job(blank_database)
            command.downgrade(cfg, "alkstore_0010_workers")
            assert _every_job(blank_database) == live
            with connect(blank_database) as conn:
                gone = conn.execute(text("SELECT to_regclass('alkstore.completed_jobs')"))
                assert gone.scalar_one() is None
            command.upgrade(cfg, "head")
            assert _every_job(blank_database) == live
            assert len(old.claim_batch("w", 20)) == 9
    finally:
        eng.dispose()
