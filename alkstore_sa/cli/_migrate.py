"""``alkstore migrate``: the package's own Alembic environment, driven through its API."""

from __future__ import annotations

import argparse

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine

from ..migrations import VERSION_TABLE

__all__ = ["alembic_config", "migrate"]


def alembic_config(schema: str) -> Config:
    """The package's migrations, without any alembic.ini (works from a wheel, any cwd)."""
    cfg = Config()
    cfg.set_main_option("script_location", "alkstore_sa:migrations")
    # The `os` separator would split "alkstore_sa:migrations/versions" at the colon.
    cfg.set_main_option("path_separator", "space")
    cfg.set_main_option("version_locations", "alkstore_sa:migrations/versions")
    # The revisions and the env read the target schema from `-x alkstore_schema=NAME`.
    cfg.cmd_opts = argparse.Namespace(x=[f"alkstore_schema={schema}"])
    return cfg


def _current(conn: Connection, schema: str) -> tuple[str, ...]:
    ctx = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )
    return ctx.get_current_heads()


def migrate(engine: Engine, schema: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Upgrade ``schema`` to head; returns (revisions before, revisions after)."""
    cfg = alembic_config(schema)
    with engine.connect() as conn:
        before = _current(conn, schema)
        conn.rollback()  # the env commits its own work; start it from a clean slate
        # The env uses a lent connection instead of opening its own (see _runner.run).
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "heads")
        after = _current(conn, schema)
        conn.rollback()
    return before, after
