"""Running a parsed ``alkstore`` command: its database, its module, its errors.

Errors a user can fix (no URL, a bad URL, an unreachable server, a schema
never migrated, an import path that does not resolve) end as one line on
stderr and exit code 2 (usage) or 1 (runtime) -- never a traceback.  The
command modules are imported here, after parsing, so ``--help`` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from .._values.errors import AlkstoreError, InvalidNameError, SchemaMissingError
from .._values.text import printable
from .._values.validate import DEFAULT_SCHEMA
from ._db import CliError, Database, resolve_schema, resolve_url

__all__ = ["dispatch"]

Command = Callable[[argparse.Namespace, Database, str], int]

# command -> (module, function): imported only for the command that runs.
_COMMANDS = {
    "migrate": ("_commands", "cmd_migrate"),
    "enqueue": ("_commands", "cmd_enqueue"),
    "stats": ("_ops", "cmd_stats"),
    "jobs": ("_jobs", "cmd_jobs"),
    "requeue": ("_ops", "cmd_requeue"),
    "purge": ("_ops", "cmd_purge"),
    "pause": ("_ops", "cmd_pause"),
    "resume": ("_ops", "cmd_resume"),
    "limits": ("_limits", "cmd_limits"),
    "sweep": ("_ops", "cmd_sweep"),
    "cancel": ("_cancel", "cmd_cancel"),
    "workers": ("_workers", "cmd_workers"),
    "workflow": ("_workflow", "cmd_workflow"),
    "worker": ("_worker", "cmd_worker"),
    "metrics": ("_metrics", "cmd_metrics"),
    "periodic": ("_periodic", "cmd_periodic"),
    "web": ("_web", "cmd_web"),
}


def _command(name: str) -> Command:
    module, function = _COMMANDS[name]
    found: Command = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    return found


def _first_line(exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return detail[0] if detail else type(exc).__name__


def migrate_hint(schema: str, url_source: str | None) -> str:
    """The command that fixes a missing schema, for the user who reads it (V3): the
    same URL (a ``--database-url`` given is needed again) and schema."""
    extra = "" if url_source != "--database-url" else " --database-url URL"
    extra += "" if schema == DEFAULT_SCHEMA else f" --schema {schema}"
    return (
        f"run `alkstore migrate{extra}` first (or `alembic upgrade heads` in an application "
        "whose own Alembic environment takes in the alkstore branch)"
    )


def dispatch(args: argparse.Namespace) -> int:
    schema = DEFAULT_SCHEMA
    source: str | None = None
    try:
        schema = resolve_schema(getattr(args, "schema", None))
        url_option = getattr(args, "database_url", None)
        if args.command == "demo":  # no URL is fine: it starts its own server
            from ._demo import cmd_demo

            return cmd_demo(args, resolve_url(url_option, required=False), schema)
        if args.command == "dev-db":  # it makes the database
            from ._devdb import cmd_dev_db

            return cmd_dev_db(args, schema)
        database = resolve_url(url_option)
        assert database is not None  # required=True raises instead of returning None
        source = database.source
        return _command(args.command)(args, database, schema)
    except CliError as exc:
        print(f"alkstore: {exc.message}", file=sys.stderr)
        return exc.code
    except SchemaMissingError:
        print(
            f"alkstore: no alkstore tables in schema {schema!r} of this database: "
            f"{migrate_hint(schema, source)}",
            file=sys.stderr,
        )
        return 1
    except InvalidNameError as exc:
        print(f"alkstore: {printable(str(exc))}", file=sys.stderr)
        return 2
    except AlkstoreError as exc:  # e.g. migrate refusing tables another Alembic env installed
        print(f"alkstore: {printable(str(exc))}", file=sys.stderr)
        return 1
    except DBAPIError as exc:  # the server went away mid-command, a permission, ...
        # The server's text may quote a row's values: escaped like any shown text.
        print(f"alkstore: database error: {printable(_first_line(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
