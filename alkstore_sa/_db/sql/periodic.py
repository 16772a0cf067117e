"""Periodic schedules' statements (P1): first sight, the compare-and-set advance, the listing.

A row per schedule holds its last fired slot; firing advances it with a
compare-and-set UPDATE in the enqueue's transaction (``tasks/_periodic.py``),
so however many workers run a schedule each slot becomes one job.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import DateTime, Select, Text, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql.dml import ReturningInsert, ReturningUpdate

from ...schema import periodic
from ._common import NOW

__all__ = ["advance", "first_sight", "last_slots"]


def _name() -> Any:
    return bindparam("p_name", type_=Text)


def _slot() -> Any:
    return bindparam("p_slot", type_=DateTime(timezone=True))


@cache
def first_sight() -> ReturningInsert[tuple[str]]:
    """Record ``:slot`` as fired for a schedule never seen; a row back only then."""
    return (
        insert(periodic)
        .values(name=_name(), last_slot=_slot())
        .on_conflict_do_nothing(index_elements=[periodic.c.name])
        .returning(periodic.c.name)
    )


@cache
def advance() -> ReturningUpdate[tuple[str]]:
    """Move the schedule's last slot up to ``:slot``; a row back only when it was older."""
    return (
        update(periodic)
        .where(periodic.c.name == _name(), periodic.c.last_slot < _slot())
        .values(last_slot=_slot(), updated_at=NOW)
        .returning(periodic.c.name)
    )


@cache
def last_slots() -> Select[Any]:
    """Every schedule's name and last fired slot (``alkstore periodic``)."""
    return select(periodic.c.name, periodic.c.last_slot)
