"""The workflow tests' sizes (issue 28), in one place.

CI runs them small; ``ALKSTORE_FULL_SIZES=1`` gives the issue's: a
1,000-wide fan-out then fan-in, a chain of 100, and kill -9 of workers
during a workflow of about 1,000 steps.  Deadlines grow with the sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_VAR = "ALKSTORE_FULL_SIZES"


@dataclass(frozen=True)
class WorkflowSizes:
    fan: int  # rule test: the fan-out's width under concurrent acks (then one fan-in)
    chain: int  # rule test: steps after the first in a chain
    procs_fan: int  # worker processes: the fan-out's width (the kill test's too)
    procs_chain: int  # worker processes: steps after the first in a chain
    kill_chain: int  # the kill test's chain
    deadline: float  # seconds the worker-process tests give their workflows to finish


SMALL = WorkflowSizes(
    fan=200, chain=19, procs_fan=100, procs_chain=12, kill_chain=10, deadline=75.0
)
# The kill test's workflows: a diamond, 1,000 + 2 fan steps, a chain of 101.
FULL = WorkflowSizes(
    fan=1_000, chain=100, procs_fan=1_000, procs_chain=100, kill_chain=100, deadline=600.0
)


def workflow_sizes() -> WorkflowSizes:
    return FULL if os.environ.get(ENV_VAR, "").strip() == "1" else SMALL


SIZES = workflow_sizes()
