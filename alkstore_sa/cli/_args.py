"""The CLI's argument types and the checks argparse cannot express itself.

Light on purpose: ``alkstore --help`` builds its parser from this module and
``_parser`` alone, importing no SQLAlchemy (V3).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .._values import validate as _validate

__all__ = [
    "age",
    "at_most",
    "cache_seconds",
    "check_purge",
    "check_requeue",
    "check_worker",
    "interval",
    "job_id",
    "port",
    "positive_int",
    "rate",
    "seconds",
]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def rate(text: str) -> tuple[int, float]:
    """F4: ``N/SECS`` -- at most N claims in any SECS seconds."""
    count, slash, per = text.partition("/")
    if not slash:
        raise argparse.ArgumentTypeError(f"expected N/SECS (e.g. 100/60), got {text!r}")
    return positive_int(count.strip()), seconds(per.strip())


def seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None


def interval(text: str) -> float:
    value = seconds(text)
    if not 0 < value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 s, got {text}")
    return value


def port(text: str) -> int:
    # 0: any free port (the URL printed says which).
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a port is a whole number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def cache_seconds(text: str) -> float:
    value = seconds(text)
    if not 0 <= value <= 86400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be 0..86400 s, got {text}")
    return value


def at_most(high: int) -> Callable[[str], int]:
    """A whole number in 1..high: the bounds of the library's own ``limit`` (O1, O2)."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def job_id(text: str) -> int:
    # Job ids are positive bigints; anything else cannot name a job.
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a job id is a whole number, got {text!r}") from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"no job has the id {value}")
    return value


def age(text: str) -> float:
    # The library's own rule for `older_than` (O3): seconds, >= 0, finite, at most 10^9.
    try:
        return _validate.duration(seconds(text), "--older-than", allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--older-than ")) from None


def check_requeue(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.ids and args.all:
        parser.error("give job ids or --all, not both")
    if not args.ids and not args.all:
        parser.error("give the ids of the dead jobs to requeue, or --all")


def check_worker(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from ._metrics import check_worker_ports

    check_worker_ports(parser, args)


def check_purge(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.ids and args.all:
        parser.error("give job ids or --all, not both")
    if not args.ids and not args.all and args.older_than is None:
        parser.error("give the ids of the dead jobs to purge, --all or --older-than SECS")
