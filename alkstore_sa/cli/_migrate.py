"""``alkstore migrate``: the package's own Alembic environment, driven through its API."""

from __future__ import annotations

from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine

from ..migrations import VERSION_TABLE
from ..migrations._config import alembic_config

__all__ = ["migrate"]


def _current(conn: Connection, schema: str) -> tuple[str, ...]:
    ctx = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    return ctx.get_current_heads()


def migrate(engine: Engine, schema: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Upgrade ``schema`` to head; returns (revisions before, revisions after)."""
    cfg = alembic_config(schema=schema)
    with engine.connect() as conn:
        before = _current(conn, schema)
        conn.rollback()  # the env commits its own work; start it from a clean slate
        # The env uses a lent connection instead of opening its own (see _runner.run).
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "heads")
        after = _current(conn, schema)
        conn.rollback()
    return before, after
