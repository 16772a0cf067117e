"""Each statement rendered once per (dialect, schema): SQL text with bound slots.

SQLAlchemy's compiled cache already compiles each statement once, but every
``Connection.execute`` of a Core statement still looks the cache up, copies
the execution options, builds the parameter dict from the compiled binds and
sets up an execution context for it -- about a fifth of an operation's
client CPU on the hot path.  The statements here never change, so this
module does that work once and the operation runs the finished text (see
``_execute.py``): the same SQL the compiled path would send and the same
bound parameters (values are never pasted into the text).  The schema is
rendered into the text exactly as ``schema_translate_map`` would render it
at execution time.

A statement this cannot render faithfully (a positional paramstyle,
escaped bind names, parameters expanded at execution, bind processors it
cannot reach -- ``_sa_internals.bind_processors``) is marked so and run
through ``Connection.execute`` as before.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, Executable
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from ...schema import DEFAULT_SCHEMA
from ..sa_internals import bind_processors

__all__ = ["Rendered", "rendered"]


@dataclass(frozen=True, slots=True)
class Rendered:
    """A statement's text for one dialect and schema, and its own bound constants."""

    sql: str
    # Values of the statement's own constants (``literal('')``, ``'processing'``):
    # still bound parameters, merged under the caller's.
    constants: dict[str, Any]
    # SQLAlchemy's bind processors for these parameters (as ``execute`` applies).
    processors: dict[str, Callable[[Any], Any]]
    # psycopg only, when no slot asks for the binary format: ``sql`` with
    # ``$1``.. placeholders, and the parameter name of each (``positional``).
    # psycopg converts ``%(name)s`` text on every execute, and caches the
    # conversion only for statements up to 4 KB: the claims are longer, and
    # the conversion cost ~120 us of client CPU per claim.  A raw cursor
    # sends this text as it is.
    raw: tuple[str, tuple[str, ...]] | None = None

    def params(self, given: dict[str, Any]) -> dict[str, Any]:
        params = {**self.constants, **given}
        for name, process in self.processors.items():
            if name in params:
                params[name] = process(params[name])
        return params

    def positional(self, bound: dict[str, Any]) -> list[Any]:
        """``bound`` (from ``params``) in ``raw``'s placeholder order."""
        assert self.raw is not None
        return [bound[name] for name in self.raw[1]]


_SLOT = re.compile(r"%\((\w+)\)([sb])|%%")


def _raw(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """``sql``'s ``%(name)s`` slots as ``$n`` (one number per name), or None if any is binary."""
    order: dict[str, int] = {}
    binary = False

    def slot(m: re.Match[str]) -> str:
        nonlocal binary
        if m.group(0) == "%%":
            return "%"
        if m.group(2) == "b":
            binary = True
        return f"${order.setdefault(m.group(1), len(order) + 1)}"

    text = _SLOT.sub(slot, sql)
    if binary or "$" in _SLOT.sub("", sql):  # a literal dollar would read as a placeholder
        return None
    return text, tuple(order)


# dialect -> {(id(statement), schema): (statement, Rendered | None)}.  The
# builders make each statement once (functools.cache); the entry keeps the
# statement too, so an id reused by a later object can never match it.  None
# marks "run it through Connection.execute".
_Entry = tuple[Executable, Rendered | None]
_cache: weakref.WeakKeyDictionary[Dialect, dict[tuple[int, str], _Entry]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def rendered(stmt: Executable, dialect: Dialect, schema: str) -> Rendered | None:
    """The statement rendered for ``dialect`` and ``schema``; ``None`` when not renderable."""
    try:
        known, result = _cache[dialect][(id(stmt), schema)]
        if known is stmt:
            return result
    except KeyError:
        pass
    result = _render(stmt, dialect, schema)
    with _lock:
        _cache.setdefault(dialect, {})[(id(stmt), schema)] = (stmt, result)
    return result


def _render(stmt: Executable, dialect: Dialect, schema: str) -> Rendered | None:
    kw: dict[str, Any] = {}
    if schema != DEFAULT_SCHEMA:
        kw = {"schema_translate_map": {DEFAULT_SCHEMA: schema}, "render_schema_translate": True}
    compiled = stmt.compile(dialect=dialect, **kw)  # type: ignore[attr-defined]
    if (
        not isinstance(compiled, SQLCompiler)
        or compiled.positional
        or compiled.escaped_bind_names
        or compiled.literal_execute_params
        or compiled.post_compile_params
        or any(bp.callable is not None for bp in compiled.binds.values())
    ):
        return None
    names = compiled.bind_names
    constants = {names[bp]: bp.value for bp in compiled.binds.values() if not bp.required}
    processors = bind_processors(compiled)
    if processors is None:
        return None
    sql = compiled.string
    if dialect.driver == "psycopg":
        # Arrays go in psycopg's binary format (%(name)b): a bytea[] of
        # payloads as the bytes they are and a bigint[] of ids as fixed-width
        # numbers, where the text format escapes every byte of every payload
        # (most of enqueue_many's client CPU) and quotes every id.  Same
        # values on the server (each slot keeps its ::TYPE[] cast).
        arrays = {names[bp] for bp in compiled.binds.values() if isinstance(bp.type, ARRAY)}
        for name in sorted(arrays):
            slot = f"%({name})s"
            if sql.count(slot) != 1:
                return None
            sql = sql.replace(slot, f"%({name})b")
        return Rendered(sql, constants, processors, _raw(sql))
    return Rendered(sql, constants, processors)
