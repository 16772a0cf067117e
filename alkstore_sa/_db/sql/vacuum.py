"""The worker's vacuum of the jobs table: when, whether allowed, and how.

PostgreSQL's autovacuum looks at a database once per ``autovacuum_naptime``
(a minute by default, a server-wide setting): at hundreds of jobs a second
the jobs table gathers tens of thousands of dead row versions between two
looks, and the claim and lapse scans step over them.  A worker that may
(the table's owner, or a superuser) vacuums it itself once it holds enough
dead versions.  Only the text of ``VACUUM`` carries the table's name, quoted
by the dialect (a schema name the store validated); every value is bound.
"""

from __future__ import annotations

from sqlalchemy import TextClause, bindparam, text
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.types import Integer, Text

__all__ = ["churn", "jobs_table", "try_lock", "unlock", "vacuum"]


def jobs_table(dialect: Dialect, schema: str) -> str:
    """``schema.jobs``, quoted as the dialect quotes identifiers."""
    return f"{dialect.identifier_preparer.quote_identifier(schema)}.jobs"


def churn() -> TextClause:
    """(dead row versions, live rows, may this role vacuum it) of ``:p_table`` (a regclass text).

    The counts are the statistics collector's (a second or so behind).  Who
    may vacuum: the owner (or a member of the owning role) and superusers;
    on PostgreSQL 17 also a role granted MAINTAIN on the table.
    """
    # Even the constant words are bound: the worker's SQL text holds no literal.
    return text(
        "SELECT s.n_dead_tup, s.n_live_tup,"
        " pg_has_role(c.relowner, :p_usage)"
        " OR (SELECT r.rolsuper FROM pg_roles AS r WHERE r.rolname = current_user)"
        # CASE, not AND: evaluated in order, so older servers never see MAINTAIN.
        " OR CASE WHEN CAST(current_setting(:p_version) AS integer) >= :p_maintain_since"
        "     THEN has_table_privilege(c.oid, :p_maintain) ELSE false END"
        " FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid"
        " WHERE s.relid = CAST(:p_table AS regclass)"
    ).bindparams(
        bindparam("p_table", type_=Text),
        bindparam("p_usage", "USAGE", type_=Text),
        bindparam("p_version", "server_version_num", type_=Text),
        bindparam("p_maintain_since", 170000, type_=Integer),
        bindparam("p_maintain", "MAINTAIN", type_=Text),
    )


def try_lock() -> TextClause:
    """One vacuum per table at a time, across workers: a session-level advisory lock."""
    return text("SELECT pg_try_advisory_lock(:p_lock_class, hashtext(:p_table))").bindparams(
        bindparam("p_lock_class", type_=Integer), bindparam("p_table", type_=Text)
    )


def unlock() -> TextClause:
    return text("SELECT pg_advisory_unlock(:p_lock_class, hashtext(:p_table))").bindparams(
        bindparam("p_lock_class", type_=Integer), bindparam("p_table", type_=Text)
    )


def vacuum(table: str) -> TextClause:
    """``VACUUM`` of ``table`` (from ``jobs_table``: an identifier, never a value)."""
    return text(f"VACUUM {table}")
