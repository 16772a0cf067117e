"""Statement builders: each returns a SQLAlchemy Core statement and does no I/O.

Values always travel as bound parameters; the statements are built once
(``functools.cache``) so SQLAlchemy's compiled cache serves every call.
"""

from . import claim, enqueue, handle, queue

__all__ = ["claim", "enqueue", "handle", "queue"]
