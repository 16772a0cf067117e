"""The pre-rendered hot path sends exactly what ``Connection.execute`` would ("Shape").

``_ops`` runs each Core statement as its text rendered once per dialect and
schema (``alkstore_sa._db.sql._render``).  Here every builder is executed both
ways on a real connection and the SQL and parameters the driver receives
(``before_cursor_execute``) are compared: same text (bar psycopg's binary
marker on array parameters), same bound values, nothing pasted in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError

from alkstore_sa._db.sql._render import rendered

from .test_sql_builders import BUILDERS

# A value of the right type for every caller parameter a builder takes.
PARAMS: dict[str, Any] = {
    "p_queue": "render",
    "p_worker_id": "w",
    "p_n": 3,
    "p_max_bytes": 1000,
    "p_payloads": [b"a", b"\x00b"],
    "p_payload": b"\x00c",
    "p_unique_key": "render-key",
    "p_unique_keys": ["render-a", None],
    "p_priority": 0,
    "p_run_at": None,
    "p_delay": timedelta(0),
    "p_max_attempts": 2,
    "p_visibility_timeout": timedelta(seconds=5),
    "p_expires_in": None,
    "p_channel": "alkstore.render",
    "p_job_id": 1,
    "p_attempts": 1,
    "p_extend": timedelta(seconds=5),
    "p_error": None,
    "p_traceback": None,
    "p_job_ids": [1, 2],
    "p_attempts_list": [1, 1],
    "p_retention": timedelta(days=1),
    "p_status": None,
    "p_before": None,
    "p_limit": 5,
    "p_older_than": None,
    "p_error_type": None,
    "p_done_channel": "alkstore.render.done",
    "p_control_channel": "alkstore.render.control",
    "p_result": None,
    "p_keep_completed": None,
    "p_timeout": "5s",
    "p_name": "render-schedule",
    "p_slot": datetime(2026, 1, 1, tzinfo=UTC),
    "p_workflow_id": 1,
    "p_jobs_table": '"alkstore".jobs',
    "p_ids": [1],
    "p_queues": ["render"],
    "p_channels": ["alkstore.render"],
    "p_prioritys": [0],
    "p_run_ats": [None],
    "p_delays": [timedelta(0)],
    "p_max_attemptss": [2],
    "p_visibility_timeouts": [timedelta(seconds=5)],
    "p_expires_ins": [None],
    "p_keep_completeds": [None],
    "p_grps": [None],
    "p_remainings": [0],
    "p_ups": [1],
    "p_downs": [1],
    "p_trace_context": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
}


def _sent(conn: Connection, run: Callable[[], object]) -> tuple[str, dict[str, Any]]:
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(*args: Any) -> None:
        if not args[2].startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")):
            seen.append((args[2], dict(args[3])))

    event.listen(conn, "before_cursor_execute", record)
    try:
        try:
            with conn.begin_nested():
                run()
        except DBAPIError:  # a schema with no tables: what was sent still counts
            pass
    finally:
        event.remove(conn, "before_cursor_execute", record)
    assert len(seen) == 1
    return seen[0]


@pytest.mark.parametrize("schema", ["alkstore", "tenant_render"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_shape_rendered_text_is_what_execute_sends(engine: Engine, name: str, schema: str) -> None:
    stmt = BUILDERS[name]()
    translate = None if schema == "alkstore" else {"alkstore": schema}
    options = {"schema_translate_map": translate}
    with engine.connect() as conn:
        text = rendered(stmt, conn.dialect, schema)
        assert text is not None
        given = {k: v for k, v in PARAMS.items() if f"%({k})" in text.sql or k in text.inlined}
        bound = text.params(given)
        via_execute = _sent(conn, lambda: conn.execute(stmt, given, execution_options=options))
        sql = text.texts(bound)[0]
        sent = {k: v for k, v in bound.items() if k not in text.inlined}
        via_text = _sent(conn, lambda: conn.exec_driver_sql(sql, sent))
        conn.rollback()
    sql, params = via_text
    # Arrays, and only arrays, are sent in binary format.
    arrays = {k for k, v in given.items() if isinstance(v, list)}
    assert set(re.findall(r"%\((\w+)\)b", sql)) == arrays
    sql = re.sub(r"%\((\w+)\)b", r"%(\1)s", sql)
    assert (sql, _unwrapped(params)) == (via_execute[0], _unwrapped(via_execute[1]))


def _unwrapped(params: dict[str, Any]) -> dict[str, Any]:
    """psycopg's ``Jsonb`` wrappers (B3's carrier) compare by identity: compare their values."""
    return {k: (type(v).__name__, v.obj) if isinstance(v, Jsonb) else v for k, v in params.items()}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_shape_raw_form_is_the_same_statement_with_numbered_slots(
    engine: Engine, name: str
) -> None:
    # The fast path sends ``Rendered.raw`` on a psycopg RawCursor (no
    # per-execute text conversion): it must be the rendered text with each
    # name's slot numbered, its values in that order -- the same statement
    # the server would get from ``%(name)s`` (psycopg numbers them alike).
    from psycopg import _queries  # what psycopg itself turns ``%(name)s`` text into
    from psycopg.adapt import Transformer

    with engine.connect() as conn:
        text = rendered(BUILDERS[name](), conn.dialect, "alkstore")
        assert text is not None
        if text.raw is None:  # a binary slot (arrays): the named form, as before
            assert re.search(r"%\(\w+\)b", text.sql)
            return
        given = {k: v for k, v in PARAMS.items() if f"%({k})" in text.sql or k in text.inlined}
        bound = text.params(given)
        sql, raw = text.texts(bound)
        converted = _queries.PostgresQuery(Transformer(conn.connection.driver_connection))
        converted.convert(sql, bound)
        order = text.raw[1]
        assert raw is not None and raw.encode() == converted.query
        assert text.positional(bound) == [bound[k] for k in order]
        assert set(order) == set(bound) - set(text.inlined)
        assert "__[POSTCOMPILE" not in raw


def test_shape_the_claim_runs_on_a_raw_cursor_on_an_autocommit_store(store: Any) -> None:
    import psycopg

    made: list[type] = []
    real = psycopg.RawCursor

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **kw: Any) -> None:
            made.append(type(self))
            super().__init__(*a, **kw)

    q = store.queue("raw-claim")
    q.enqueue(b"x")
    import alkstore_sa._db.execute as execute

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(execute.psycopg, "RawCursor", Spy)
        [h] = q.claim_batch("w", 10)
    assert made and h.payload == b"x"
