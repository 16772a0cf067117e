"""When a queue's claims next set its expired rows aside (``_db/sql/claim.park``).

An expired row that outranks the due ones is read by every claim until the
sweep moves it (the claim index orders by priority, and only the row says
it expired).  Parking it once takes it out of the claim's range for good,
at one row write.  Claims park at most every ``PARK_EVERY`` seconds per
queue object, and again at once while a park comes back full: a backlog
of expired rows is parked ``PARK_LIMIT`` at a time over the next claims,
and a queue with none pays one index descent a second.
"""

from __future__ import annotations

import time

__all__ = ["PARK_EVERY", "PARK_LIMIT", "Parker"]

PARK_EVERY = 1.0
# Rows per park: a few milliseconds of writes added to one claim.
PARK_LIMIT = 1000


class Parker:
    """The park schedule of one queue object (shared by its threads: races only repeat a park)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0.0

    def take(self) -> bool:
        """True when this claim should park; the next one waits ``PARK_EVERY``."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + PARK_EVERY
        return True

    def parked(self, count: int) -> None:
        """A full park means more are waiting: the next claim parks again."""
        if count >= PARK_LIMIT:
            self._next = 0.0
