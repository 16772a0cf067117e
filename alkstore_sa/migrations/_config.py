"""The one Alembic config for the package's own migrations.

``alkstore migrate``, the benchmark suite and the test harness all run the
revisions through this; ``alembic.ini`` at the repository root says the same
for the ``alembic`` command line (``script_location = alkstore_sa:migrations``,
a test keeps the two in step).  The script location is a package resource, so
it needs no ``alembic.ini`` and works from a wheel in any working directory;
the revisions are found in its ``versions/`` directory, Alembic's default.
"""

from __future__ import annotations

import argparse

from alembic.config import Config
from sqlalchemy import URL

__all__ = ["SCRIPT_LOCATION", "alembic_config"]

SCRIPT_LOCATION = "alkstore_sa:migrations"


def alembic_config(*, url: URL | str | None = None, schema: str | None = None) -> Config:
    """A config that runs the package's env (``env.py``) and revisions.

    ``url`` becomes ``sqlalchemy.url``; without it the env reads
    ``ALKSTORE_DATABASE_URL``, unless a caller lends a connection through
    ``config.attributes["connection"]``.  ``schema`` is passed the way the
    command line passes it (``-x alkstore_schema=NAME``); without it the
    revisions read ``ALKSTORE_SCHEMA``, else use ``alkstore``.
    """
    cmd_opts = None if schema is None else argparse.Namespace(x=[f"alkstore_schema={schema}"])
    cfg = Config(cmd_opts=cmd_opts)
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if url is not None:
        rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        # The config is a ConfigParser: a literal % (an escaped password) must be doubled.
        cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg
