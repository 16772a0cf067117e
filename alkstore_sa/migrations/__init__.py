"""Alembic migrations shipped with the package (branch label ``alkstore``).

The revisions read the target schema from ``-x alkstore_schema=NAME``, else
the ``ALKSTORE_SCHEMA`` environment variable, else ``alkstore`` -- in our own
environment and in a host application's alike.
"""

from __future__ import annotations

import os

from .._values.errors import InvalidNameError
from .._values.validate import schema_name
from ..schema import DEFAULT_SCHEMA

__all__ = ["VERSION_TABLE", "migration_schema"]

VERSION_TABLE = "alkstore_alembic_version"


def migration_schema() -> str:
    """The schema the running migration targets (validated)."""
    from alembic import context

    name: str | None = None
    try:
        name = context.get_x_argument(as_dictionary=True).get("alkstore_schema")
    except (AttributeError, NameError):  # not inside an Alembic run
        name = None
    source = "-x alkstore_schema"
    if not name:  # unset or empty: the next source decides
        name, source = os.environ.get("ALKSTORE_SCHEMA"), "ALKSTORE_SCHEMA"
    if not name:
        return DEFAULT_SCHEMA
    try:
        return schema_name(name)
    except InvalidNameError as exc:  # say where the bad name came from
        raise InvalidNameError(f"alkstore: {source}: {exc}") from None
