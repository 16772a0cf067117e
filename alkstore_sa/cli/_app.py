"""``--app MODULE:OBJ``: the application's queues and their options (O8).

The operations commands (``stats``, ``jobs``, ``sweep``, ``enqueue``) act on
queue names; ``--app`` names the application's Worker (or AsyncWorker, or a
callable returning one) so they act with the options the application gives
its queue handles -- stamps for ``enqueue``, ``dead_letter_retention`` for
``sweep`` -- and can warn about a queue name the application does not use.
The database still comes from ``--database-url``/``ALKSTORE_DATABASE_URL``:
the application's own engine is never used.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._values.opts import QueueOpts
from ..aio import AsyncQueue
from ..store import Queue
from ..tasks import Tasks
from ..worker import AsyncWorker, Worker
from ._db import CliError, Database, export_to_environment
from ._loader import call_factory, load_object

__all__ = ["App", "load_app", "opts_for", "warn_undeclared"]

# What `--app` may name.
WANTED = "a Worker or AsyncWorker (for example myapp.tasks:worker) or a Tasks registry"


@dataclass(frozen=True)
class App:
    """The queues an application declares, by name, with their handles' options."""

    spec: str
    queues: dict[str, QueueOpts] = field(default_factory=dict)

    def queue_for(self, name: str) -> QueueOpts | None:
        """The options the application gives queue ``name``; ``None`` if it has no such queue."""
        return self.queues.get(name)


def opts_for(app: App | None, name: str) -> QueueOpts | None:
    return None if app is None else app.queue_for(name)


def warn_undeclared(app: App | None, names: Iterable[str], *, uses_opts: bool = False) -> None:
    """One stderr line per name the application does not declare; the exit status is unchanged.

    ``uses_opts``: the command acts with the queue's options, so say which apply.
    """
    if app is None:
        return
    declared = ", ".join(sorted(app.queues)) or "none"
    then = "; the default QueueOpts apply" if uses_opts else ""
    for name in names:
        if app.queue_for(name) is None:
            print(
                f"alkstore: warning: queue {name!r} is not one of {app.spec}'s queues "
                f"({declared}){then}",
                file=sys.stderr,
            )


def _declared(obj: Worker | AsyncWorker | Tasks[Any]) -> list[Queue | AsyncQueue]:
    return list(obj.queues)


def load_app(spec: str, database: Database, schema: str) -> App:
    """Import ``spec`` (``MODULE:OBJ``) and collect its queues' options by name.

    The application's module usually builds its Store from
    ``ALKSTORE_DATABASE_URL``/``ALKSTORE_SCHEMA``: they are set from the
    command line first, as ``alkstore worker`` does.  When two handles share a
    name (stores on different schemas), the one on ``schema`` wins.
    """
    export_to_environment(database, schema)
    obj = load_object(spec)
    if not isinstance(obj, Worker | AsyncWorker | Tasks):
        if not callable(obj) or isinstance(obj, type):
            raise CliError(
                f"--app {spec!r} is a {type(obj).__name__}, not {WANTED} "
                "or a function returning one",
                code=2,
            )
        made = call_factory(spec, obj, WANTED, label="--app ")
        if not isinstance(made, Worker | AsyncWorker | Tasks):
            raise CliError(
                f"--app {spec!r} returned a {type(made).__name__}, not {WANTED}",
                code=2,
            )
        obj = made
    queues: dict[str, QueueOpts] = {}
    for queue in _declared(obj):
        if queue.name not in queues or queue.store.schema == schema:
            queues[queue.name] = queue.opts
    return App(spec, queues)
