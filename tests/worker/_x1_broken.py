"""A factory whose module imports in the supervisor but fails in a spawned child (X1)."""

from __future__ import annotations

import os

# The first import (the supervisor's) marks the environment, which the
# spawned children inherit; a child imports this module while it unpickles
# the factory, before child_main runs, and fails there.
_MARK = "X1_BROKEN_IMPORTED_BY"
if os.environ.setdefault(_MARK, str(os.getpid())) != str(os.getpid()):
    raise RuntimeError("x1: this module refuses to import in a child process")


def make_worker() -> object:
    raise AssertionError("never reached: the child cannot import this module")
