"""alkstore: CHECK constraints keep rows the library cannot load out of the tables

Revision ID: alkstore_0009_row_checks
Revises: alkstore_0008_parked_expired
Create Date: 2026-12-01

Anyone who may INSERT into ``jobs`` (the app role) or UPDATE its
``run_at``/``errors`` (the worker role), or a producer in another language,
could write a row no claim can hand out: ``'-infinity'`` in ``run_at``
(psycopg cannot load it, so a claim that took it failed after committing,
and every job of its batch lost an attempt without running), a visibility
timeout of 100,000,000 years (every claim of the queue failed on the server,
``timestamp out of range``), ``errors`` that is not a JSON array, or
``attempts`` at the top of ``integer`` (the claim's ``attempts + 1``
overflows).  The constraints below refuse such rows on the way in:

- every time lies between 0001-01-02 and 9999-12-30 UTC (what
  ``_values/validate.aware_datetime`` accepts: Python can show it in any
  session time zone); ``infinity`` fails both bounds;
- ``visibility_timeout`` at most 10^9 seconds (``validate.MAX_SECONDS``),
  so ``now + visibility_timeout`` never leaves that range for centuries;
  in ``dead_jobs`` also above zero (a requeue copies it back);
- ``errors`` a JSON array or NULL (``trace_context`` is left free: a
  carrier the library cannot read only starts a fresh trace, B3);
- a live row's ``attempts`` at most ``max_attempts``, and below it while
  pending: the claim's ``attempts + 1`` then never passes ``max_attempts``
  (so never overflows), and no statement of the library writes a row
  outside it (a retry, a release or a lapse at the last attempt moves the
  job to dead); ``max_attempts`` at least 1 in ``dead_jobs`` too.

Rows already there are repaired first, in this transaction, so the
constraints can be added as VALID: times are clamped into the range (an
``expires_at`` of +infinity, "never", becomes NULL, which means the same),
visibility timeouts above the bound become the bound (below zero in
``dead_jobs``: one second), ``errors`` that is not an array becomes NULL,
a dead row's ``max_attempts`` below 1 becomes 1.  A live row whose
attempts are out of range cannot be repaired without deciding how often it
may still run, so it is dead-lettered, its ``last_error`` saying why.  The
way down drops the constraints; the repairs stay (every repaired value was
one the library could not load).

Queue names are now NFC (``validate.queue_name`` normalizes them, so
``café`` and ``cafe`` + U+0301 are one queue): rows under a name in another
form move to its NFC form, so such a queue keeps draining.  They are not
moved back on the way down (an older library opens the NFC name, which
still holds them; only a caller that spelled it otherwise loses them).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0009_row_checks"
down_revision: str | Sequence[str] | None = "alkstore_0008_parked_expired"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
MAX_VT = "'1000000000 seconds'::interval"
ATTEMPTS_ERROR = "row check (alkstore_0009): attempts out of range for max_attempts"


def _in_range(column: str, nullable: bool) -> str:
    check = f"{column} >= {EARLIEST} AND {column} <= {LATEST}"
    return f"({column} IS NULL OR ({check}))" if nullable else f"({check})"


def _times(required: Sequence[str], optional: Sequence[str]) -> str:
    return " AND ".join(
        [_in_range(c, False) for c in required] + [_in_range(c, True) for c in optional]
    )


# name (the naming convention's %(constraint_name)s), table, condition.  The
# same text as schema.py, so pg_get_constraintdef shows the same (a test).
CHECKS: tuple[tuple[str, str, str], ...] = (
    (
        "jobs",
        "times",
        _times(["run_at", "created_at"], ["expires_at", "claim_deadline", "deadline_floor"]),
    ),
    ("jobs", "visibility_timeout_bound", f"visibility_timeout <= {MAX_VT}"),
    ("jobs", "errors", "errors IS NULL OR jsonb_typeof(errors) = 'array'"),
    (
        "jobs",
        "attempts_left",
        "attempts <= max_attempts AND (status <> 'pending' OR attempts < max_attempts)",
    ),
    (
        "dead_jobs",
        "times",
        _times(["run_at", "created_at", "died_at"], ["expires_at", "claim_deadline"]),
    ),
    (
        "dead_jobs",
        "visibility_timeout",
        f"visibility_timeout > interval '0' AND visibility_timeout <= {MAX_VT}",
    ),
    ("dead_jobs", "max_attempts", "max_attempts >= 1"),
    ("dead_jobs", "errors", "errors IS NULL OR jsonb_typeof(errors) = 'array'"),
)


def _clamp(column: str) -> str:
    return f"{column} = GREATEST(LEAST({column}, {LATEST}), {EARLIEST})"


def _out_of_range(column: str) -> str:
    return f"({column} < {EARLIEST} OR {column} > {LATEST})"


def _repair(schema: str, table: str, times: Sequence[str], vt_floor: bool) -> None:
    t = f'"{schema}".{table}'
    # +infinity (or past the range) in expires_at: "never expires" is NULL.
    op.execute(f"UPDATE {t} SET expires_at = NULL WHERE expires_at > {LATEST}")
    for column in times:
        op.execute(f"UPDATE {t} SET {_clamp(column)} WHERE {_out_of_range(column)}")
    op.execute(f"UPDATE {t} SET visibility_timeout = {MAX_VT} WHERE visibility_timeout > {MAX_VT}")
    if vt_floor:
        op.execute(
            f"UPDATE {t} SET visibility_timeout = interval '1 second'"
            " WHERE visibility_timeout <= interval '0'"
        )
        op.execute(f"UPDATE {t} SET max_attempts = 1 WHERE max_attempts < 1")
    op.execute(f"UPDATE {t} SET errors = NULL WHERE jsonb_typeof(errors) <> 'array'")


def _dead_letter_attempts(schema: str) -> None:
    """Live rows with no sensible attempts left go to dead, saying why."""
    columns = (
        "id, queue, payload, priority, run_at, attempts, max_attempts, visibility_timeout,"
        " expires_at, worker_id, claim_deadline, created_at, errors, trace_context, unique_key"
    )
    op.execute(
        f'WITH moved AS (DELETE FROM "{schema}".jobs'
        " WHERE attempts > max_attempts OR (status = 'pending' AND attempts >= max_attempts)"
        f" RETURNING {columns})"
        f' INSERT INTO "{schema}".dead_jobs ({columns}, last_error, died_at)'
        f" SELECT {columns}, '{ATTEMPTS_ERROR}', statement_timestamp() FROM moved"
    )


NFC_DUPLICATE_ERROR = (
    "row check (alkstore_0009): its unique key is live under the NFC form of its queue name"
)


def _nfc_queue_names(schema: str) -> None:
    """Queue names as the library now spells them: NFC (``validate.queue_name``).

    ``café`` written as ``e`` + U+0301 was a queue of its own that looked
    the same; the library now opens it as ``café``, so its rows move there
    and keep draining.  A live job whose unique key is already live under
    the NFC name cannot join it (U1): it is dead-lettered, saying why.  A
    pause or a throughput minute already held under the NFC name wins.
    PostgreSQL's normalize() needs a UTF8 database; in any other encoding
    no name can hold such characters, so nothing is done.
    """
    encoding = op.get_bind().exec_driver_sql("SHOW server_encoding").scalar()
    if encoding != "UTF8":
        return
    s = f'"{schema}"'
    odd = "queue IS NOT NFC NORMALIZED"
    clash = (
        f"unique_key IS NOT NULL AND EXISTS (SELECT 1 FROM {s}.jobs AS other"
        " WHERE normalize(other.queue, NFC) = normalize(j.queue, NFC)"
        " AND other.unique_key = j.unique_key"
        " AND other.id <> j.id AND (other.queue IS NFC NORMALIZED OR other.id < j.id))"
    )
    columns = (
        "id, queue, payload, priority, run_at, attempts, max_attempts, visibility_timeout,"
        " expires_at, worker_id, claim_deadline, created_at, errors, trace_context, unique_key"
    )
    op.execute(
        f"WITH moved AS (DELETE FROM {s}.jobs AS j WHERE j.{odd} AND {clash} RETURNING *)"
        f" INSERT INTO {s}.dead_jobs ({columns}, last_error, died_at)"
        f" SELECT {columns.replace('queue,', 'normalize(queue, NFC),', 1)},"
        f" '{NFC_DUPLICATE_ERROR}', statement_timestamp() FROM moved"
    )
    for table in ("jobs", "dead_jobs"):
        op.execute(f"UPDATE {s}.{table} SET queue = normalize(queue, NFC) WHERE {odd}")
    op.execute(
        f"DELETE FROM {s}.paused_queues AS p WHERE p.{odd} AND EXISTS (SELECT 1 FROM"
        f" {s}.paused_queues AS n WHERE n.queue = normalize(p.queue, NFC))"
    )
    op.execute(f"UPDATE {s}.paused_queues SET queue = normalize(queue, NFC) WHERE {odd}")
    op.execute(
        f"DELETE FROM {s}.throughput AS t WHERE t.{odd} AND EXISTS (SELECT 1 FROM"
        f" {s}.throughput AS n WHERE n.queue = normalize(t.queue, NFC) AND n.minute = t.minute)"
    )
    op.execute(f"UPDATE {s}.throughput SET queue = normalize(queue, NFC) WHERE {odd}")


def upgrade() -> None:
    schema = migration_schema()
    _nfc_queue_names(schema)
    _repair(
        schema,
        "jobs",
        ["run_at", "created_at", "expires_at", "claim_deadline", "deadline_floor"],
        False,
    )
    _dead_letter_attempts(schema)
    _repair(
        schema,
        "dead_jobs",
        ["run_at", "created_at", "died_at", "expires_at", "claim_deadline"],
        True,
    )
    for table, name, condition in CHECKS:
        op.create_check_constraint(op.f(f"{table}_{name}_ck"), table, condition, schema=schema)


def downgrade() -> None:
    schema = migration_schema()
    for table, name, _ in reversed(CHECKS):
        op.drop_constraint(op.f(f"{table}_{name}_ck"), table, type_="check", schema=schema)
