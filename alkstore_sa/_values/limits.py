"""Flow control's values (F1): ``Limits`` and ``Rate``, validated on construction.

Validation happens here, before any SQL: a count that is not an ``int`` is
a ``TypeError``, one below 1 a ``ValueError``; a ``per`` is seconds (int or
float) or a ``timedelta``, > 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from . import validate as v

__all__ = ["MAX_GROUP_CHARS", "Limits", "Rate", "group_name"]

# F1: a job's group is at most this many characters, and not empty.
MAX_GROUP_CHARS = 200


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` claims in any window of ``per`` seconds (F4).

    ``per`` may be given as a ``timedelta``; it is kept as float seconds.
    """

    count: int
    per: float

    def __init__(self, count: int, per: float | int | timedelta) -> None:
        object.__setattr__(self, "count", v.integer(count, "Rate.count", minimum=1))
        object.__setattr__(self, "per", v.duration(per, "Rate.per"))

    def __str__(self) -> str:
        return f"{self.count}/{self.per:g}s"


@dataclass(frozen=True, slots=True)
class Limits:
    """A queue's limits (F1-F4); each left ``None`` is not limited.

    ``concurrency``: live claims of the queue's jobs at once (F2).
    ``group_concurrency``: the same per group (F3).  ``rate`` /
    ``group_rate``: claims per window of the database clock (F4).
    """

    concurrency: int | None = None
    group_concurrency: int | None = None
    rate: Rate | None = None
    group_rate: Rate | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None:
            v.integer(self.concurrency, "concurrency", minimum=1)
        if self.group_concurrency is not None:
            v.integer(self.group_concurrency, "group_concurrency", minimum=1)
        for name in ("rate", "group_rate"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Rate):
                raise TypeError(f"{name} must be a Rate or None, got {type(value).__name__}")

    @property
    def empty(self) -> bool:
        """No limit is set (``set_limits`` of such a value removes the queue's limits)."""
        return (
            self.concurrency is None
            and self.group_concurrency is None
            and self.rate is None
            and self.group_rate is None
        )


def group_name(value: object) -> str:
    """F1: a group is a non-empty ``str`` of at most MAX_GROUP_CHARS characters, no NUL."""
    if not isinstance(value, str):
        raise TypeError(f"group must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError("group must not be empty")
    if len(value) > MAX_GROUP_CHARS:
        raise ValueError(f"group must be at most {MAX_GROUP_CHARS} characters, got {len(value)}")
    if "\x00" in value:
        raise ValueError("group must not contain NUL characters (PostgreSQL text cannot)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("group is not valid Unicode (a lone surrogate)") from None
    return value
