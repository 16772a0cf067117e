"""Where a store's and a queue's statements go: schema, queue name, wake channel."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .._values import validate as v

__all__ = ["QueueAddress", "StoreAddress", "channel_for"]


def channel_for(schema: str, queue: str) -> str:
    """The queue's wake channel: unique per (schema, queue), at most 63 bytes.

    Readable ``schema.queue`` when it fits; otherwise ``#`` and a hash.  A
    schema name is an identifier, so it never starts with ``#`` and the two
    forms cannot collide.
    """
    readable = f"{schema}.{queue}"
    if len(readable.encode("utf-8")) <= v.MAX_NAME_BYTES:
        return readable
    digest = hashlib.blake2b(f"{schema}\0{queue}".encode(), digest_size=16).hexdigest()
    return f"#{digest}"


@dataclass(frozen=True, slots=True)
class StoreAddress:
    """Where a store's statements go: its schema (O6's store-wide reads need no more)."""

    schema: str

    @property
    def done_channel(self) -> str:
        """R3: told when a job that keeps a result completes (or a job dies).

        No queue's channel can be it: queue names never start with ``alkstore``.
        """
        return channel_for(self.schema, "alkstore.done")

    @property
    def control_channel(self) -> str:
        """C1: told which claimed jobs were cancelled (``cancel:<ids>``); workers LISTEN."""
        return channel_for(self.schema, "alkstore.control")

    @property
    def execution_options(self) -> dict[str, Any]:
        if self.schema == "alkstore":
            # The tables' own placeholder: nothing to translate.  A translate
            # map costs a regex pass over the SQL on every execution, and None
            # still overrides any map set on the engine, as the map did.
            return _UNTRANSLATED
        return {"schema_translate_map": {"alkstore": self.schema}}


_UNTRANSLATED: dict[str, Any] = {"schema_translate_map": None}


@dataclass(frozen=True, slots=True)
class QueueAddress(StoreAddress):
    """Where a queue's statements go: its schema, name and wake channel."""

    queue: str
    channel: str
