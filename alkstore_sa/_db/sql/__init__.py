"""Statement builders: each returns a SQLAlchemy Core statement and does no I/O.

Values always travel as bound parameters.  The statements are built once
(``functools.cache``); ``_render`` turns each into its SQL text once per
dialect and schema for ``_ops`` to execute.
"""

from . import claim, enqueue, handle, operations, queue, stats

__all__ = ["claim", "enqueue", "handle", "operations", "queue", "stats"]
