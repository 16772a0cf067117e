"""The Alembic environment shared by `alembic upgrade head` and `alkstore migrate`.

The database comes from ``sqlalchemy.url`` in the Alembic config if set, else
``ALKSTORE_DATABASE_URL``.  Bad or unreachable URLs end in a one-line error
naming the variable instead of a traceback.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool
from sqlalchemy.schema import CreateSchema

from alkstore_sa._db.url import (
    ENV_VAR,
    database_url_from_env,
    describe_connect_error,
    normalize_url,
)
from alkstore_sa._values.errors import InvalidNameError
from alkstore_sa.migrations import VERSION_TABLE, migration_schema
from alkstore_sa.schema import metadata


def run() -> None:
    config = context.config
    try:
        schema = migration_schema()
    except InvalidNameError as exc:  # one line, not a traceback
        raise SystemExit(str(exc)) from None
    given = config.attributes.get("connection")
    if given is not None:  # a caller (tests, the CLI) lends its own connection
        _migrate(given, schema)
        return
    option = config.get_main_option("sqlalchemy.url")
    try:
        url = normalize_url(option, source="sqlalchemy.url") if option else database_url_from_env()
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if context.is_offline_mode():
        context.configure(
            url=url,
            target_metadata=metadata,
            literal_binds=True,
            version_table=VERSION_TABLE,
            version_table_schema=schema,
        )
        with context.begin_transaction():
            context.run_migrations()
        return

    source = "sqlalchemy.url" if option else ENV_VAR
    try:
        # create_engine too: an unknown driver (postgresql+nodriver) fails there.
        connection = create_engine(url, poolclass=pool.NullPool).connect()
    except Exception as exc:  # the whole point is to turn it into one line
        raise SystemExit(describe_connect_error(exc, source=source)) from None
    with connection:
        _migrate(connection, schema)


def _migrate(connection: Connection, schema: str) -> None:
    # The version table lives in our schema, so the schema must exist first.
    connection.execute(CreateSchema(schema, if_not_exists=True))
    connection.commit()
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
