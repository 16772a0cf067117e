"""Calls: a public method's arguments, validated, turned into a function of one connection.

``Call[T]`` is that function: the sync faces run it on a connection, the
async faces hand it to ``run_sync``, the worker's runners do either.
"""

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection

__all__ = ["Call"]

T = TypeVar("T")
Call = Callable[[Connection], T]
