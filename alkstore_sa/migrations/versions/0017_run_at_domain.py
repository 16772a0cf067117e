"""alkstore: run_at's range on the loadable_time domain, same rows allowed

Revision ID: alkstore_0017_run_at_domain
Revises: alkstore_0016_claim_index_parked
Create Date: 2026-12-05

0015 moved the range of every time column of ``jobs`` but ``run_at`` onto
the ``loadable_time`` domain, whose check PostgreSQL plans once per
connection and runs only on a value a statement assigns; ``run_at`` kept
a table check (``jobs_run_at_ck``), which every INSERT and UPDATE on
``jobs`` reads back from its stored text -- because the generated
``claim_at`` read ``run_at``, and PostgreSQL refuses to change the type of
a column a generated column uses.  0016 dropped ``claim_at``, so ``run_at``
joins the others: 925 of the 4,946 characters of table checks every
statement on ``jobs`` reads back, the same range (0001-01-02 .. 9999-12-30,
inclusive), the same SQLSTATE (23514) for a value outside it.

The way up takes the domain's check off, moves ``run_at`` onto the domain
(over the same base type and, for that moment, without a check: no table
rewrite) and puts the check back, which reads every row of the domain's
columns once -- rows that met ``jobs_run_at_ck`` meet it.  The way down
moves ``run_at`` back to ``timestamptz`` and restores ``jobs_run_at_ck``.
No row changes either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from alkstore_sa.migrations import migration_schema

revision: str = "alkstore_0017_run_at_domain"
down_revision: str | Sequence[str] | None = "alkstore_0016_claim_index_parked"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EARLIEST = "'0001-01-02 00:00:00+00'::timestamptz"
LATEST = "'9999-12-30 00:00:00+00'::timestamptz"
LOADABLE = f"VALUE >= {EARLIEST} AND VALUE <= {LATEST}"
RUN_AT = f"run_at >= {EARLIEST} AND run_at <= {LATEST}"


def _q(name: str) -> str:
    """An identifier, always quoted (the schema is the user's choice)."""
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    schema = migration_schema()
    domain = f"{_q(schema)}.loadable_time"
    op.execute(f"ALTER DOMAIN {domain} DROP CONSTRAINT loadable_time_ck")
    op.execute(
        f"ALTER TABLE {_q(schema)}.jobs DROP CONSTRAINT jobs_run_at_ck,"
        f" ALTER COLUMN run_at TYPE {domain}"
    )
    op.execute(f"ALTER DOMAIN {domain} ADD CONSTRAINT loadable_time_ck CHECK ({LOADABLE})")


def downgrade() -> None:
    schema = migration_schema()
    op.execute(f"ALTER TABLE {_q(schema)}.jobs ALTER COLUMN run_at TYPE timestamptz")
    op.create_check_constraint(op.f("jobs_run_at_ck"), "jobs", RUN_AT, schema=schema)
