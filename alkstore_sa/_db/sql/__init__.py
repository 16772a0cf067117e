"""Statement builders: each returns a SQLAlchemy Core statement and does no I/O.

Values always travel as bound parameters.  The statements are built once
(``functools.cache``); ``_render`` turns each into its SQL text once per
dialect and schema for ``_db/execute.py`` to run.  One module per operation
family; what every family shares is in ``_common``.
"""

from . import (
    claim,
    dashboard,
    enqueue,
    handle,
    periodic,
    queue_admin,
    queue_wide,
    stats,
    throughput,
    vacuum,
)

__all__ = [
    "claim",
    "dashboard",
    "enqueue",
    "handle",
    "periodic",
    "queue_admin",
    "queue_wide",
    "stats",
    "throughput",
    "vacuum",
]
