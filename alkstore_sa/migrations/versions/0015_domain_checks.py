"""alkstore: jobs' single-column checks on domains, same rows allowed

Revision ID: alkstore_0015_domain_checks
Revises: alkstore_0014_compact_checks
Create Date: 2026-12-05

PostgreSQL reads every CHECK constraint of a table back from its stored
text, and plans it, once per INSERT or UPDATE statement on the table --
all of them, whichever columns the statement writes.  Measured from a
client, ``jobs``' nine checks were ~26 us of an enqueue's server time and
~50 us of a one-job claim's (docs/benchmarks.md, stop 36).  A domain's
check is planned once per backend (PostgreSQL keeps it in its type cache)
and runs only on a value assigned to a column of that domain: the claim,
which assigns ``claim_deadline`` and ``deadline_floor`` only, no longer
reads the others' checks at all.

Moved from ``jobs``' table checks onto domains, each with the condition it
had (a CHECK passes on NULL, and so does a domain's):

- ``loadable_time``: ``created_at``, ``expires_at``, ``claim_deadline``,
  ``deadline_floor`` -- within 0001-01-02 .. 9999-12-30 (0009's range);
- ``visibility_timeout``: ``visibility_timeout`` -- above zero and at most
  10**9 seconds;
- ``error_history``: ``errors`` -- a JSON array.

``run_at`` keeps its range as a table check (``jobs_run_at_ck``): the
generated ``claim_at`` reads it, and PostgreSQL refuses to change the type
of a column a generated column uses.  ``max_attempts`` keeps its table
check too: ``jobs_attempts_left_ck`` compares it with ``attempts``, and
on a domain that check would be stored (and compared, M2) with casts.
``dead_jobs`` is untouched: it is written when a job dies, not per claim.

The way up makes each domain without its check, moves the columns onto it
(a domain without constraints over the same type: no table rewrite), then
adds the check to the domain, which reads every row once -- rows that met
0014's checks meet these, so live jobs stay as they are.  The way down
moves the columns back and restores 0014's constraints as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0015_domain_checks"
down_revision: str | Sequence[str] | None = "alkstore_0014_compact_checks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
MAX_VT = "'1000000000 seconds'::interval"

# domain -> (base type, its check on VALUE, the jobs columns it types)
DOMAINS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "loadable_time": (
        "timestamptz",
        f"VALUE >= {EARLIEST} AND VALUE <= {LATEST}",
        ("created_at", "expires_at", "claim_deadline", "deadline_floor"),
    ),
    "visibility_timeout": (
        "interval",
        f"VALUE > interval '0' AND VALUE <= {MAX_VT}",
        ("visibility_timeout",),
    ),
    "error_history": ("jsonb", "jsonb_typeof(VALUE) = 'array'", ("errors",)),
}
RUN_AT = f"run_at >= {EARLIEST} AND run_at <= {LATEST}"

# 0014's table checks these replace, for the way down (name -> condition).
REPLACED = {
    "times": (
        "LEAST(run_at, created_at, expires_at, claim_deadline, deadline_floor) >= "
        f"{EARLIEST} AND GREATEST(run_at, created_at, expires_at, claim_deadline, "
        f"deadline_floor) <= {LATEST}"
    ),
    "visibility_timeout": "visibility_timeout > interval '0'",
    "visibility_timeout_bound": f"visibility_timeout <= {MAX_VT}",
    "errors": "jsonb_typeof(errors) = 'array'",
}


def _q(name: str) -> str:
    """An identifier, always quoted (the schema is the user's choice)."""
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    for domain, (base, _, _) in DOMAINS.items():
        op.execute(f"CREATE DOMAIN {s}.{_q(domain)} AS {base}")
    moves = [
        f"ALTER COLUMN {_q(column)} TYPE {s}.{_q(domain)}"
        for domain, (_, _, columns) in DOMAINS.items()
        for column in columns
    ]
    drops = [f"DROP CONSTRAINT {_q(f'jobs_{name}_ck')}" for name in REPLACED]
    op.execute(f"ALTER TABLE {s}.jobs {', '.join(drops + moves)}")
    for domain, (_, check, _) in DOMAINS.items():
        op.execute(
            f"ALTER DOMAIN {s}.{_q(domain)} ADD CONSTRAINT {_q(f'{domain}_ck')} CHECK ({check})"
        )
    op.create_check_constraint(op.f("jobs_run_at_ck"), "jobs", RUN_AT, schema=schema)


def downgrade() -> None:
    schema = migration_schema()
    s = _q(schema)
    op.drop_constraint(op.f("jobs_run_at_ck"), "jobs", type_="check", schema=schema)
    moves = [
        f"ALTER COLUMN {_q(column)} TYPE {base}"
        for base, _, columns in DOMAINS.values()
        for column in columns
    ]
    op.execute(f"ALTER TABLE {s}.jobs {', '.join(moves)}")
    for domain in DOMAINS:
        op.execute(f"DROP DOMAIN {s}.{_q(domain)}")
    for name, condition in REPLACED.items():
        op.create_check_constraint(op.f(f"jobs_{name}_ck"), "jobs", condition, schema=schema)
