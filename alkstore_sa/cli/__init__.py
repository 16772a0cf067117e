"""The ``alkstore`` command: migrate, worker, enqueue, stats, jobs, cancel, requeue, purge,
pause, resume, sweep, workers, periodic, metrics, web, demo, dev-db, bench.

``_parser`` builds the command line from light modules only; ``_dispatch``
runs what was parsed (one line and an exit code for what a user can fix,
never a traceback).  ``alkstore --help`` therefore imports neither
SQLAlchemy nor Alembic nor any optional extra (V3).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._errors import CliError
from ._parser import build_parser

__all__ = ["build_parser", "main"]


def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        from ._bench import cmd_bench

        try:
            return cmd_bench(argv[1:])
        except CliError as exc:
            print(f"alkstore: {exc.message}", file=sys.stderr)
            return exc.code
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    check = getattr(args, "check", None)
    if check is not None:  # what argparse cannot say itself (ids or --all); exits 2
        check(args)
    from ._dispatch import dispatch

    return dispatch(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``alkstore``)."""
    return run(argv)
