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

Two kinds of value are part of the text, never a caller's: the job
statuses (``'pending'``, ``'processing'``), which the partial indexes'
predicates name, and a claim's batch size (an ``int``, SQLAlchemy's
``literal_execute``: one text per size, filled in at execution).  With both
in the text PostgreSQL can plan a prepared claim once (a generic plan that
uses the partial indexes) instead of on every run.

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
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ARRAY, Executable, Integer
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
    # Integer parameters rendered into the text at execution (``literal_execute``:
    # the claim's batch size), and the texts made so far, per value.
    inlined: tuple[str, ...] = ()
    _texts: dict[tuple[int, ...], tuple[str, str | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def texts(self, bound: dict[str, Any]) -> tuple[str, str | None]:
        """``sql`` and ``raw``'s text with ``bound``'s values of the inlined parameters."""
        if not self.inlined:
            return self.sql, self.raw[0] if self.raw is not None else None
        values = tuple(_integer(name, bound.get(name)) for name in self.inlined)
        try:
            return self._texts[values]
        except KeyError:
            pass
        sql, raw = self.sql, self.raw[0] if self.raw is not None else None
        for name, value in zip(self.inlined, values, strict=True):
            marker = f"__[POSTCOMPILE_{name}]"
            sql = sql.replace(marker, str(value))
            raw = raw.replace(marker, str(value)) if raw is not None else None
        if len(self._texts) < _TEXTS_KEPT:
            self._texts[values] = (sql, raw)
        return sql, raw

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


# Texts kept per statement, one per batch size used (a worker uses a handful).
_TEXTS_KEPT = 256


def _integer(name: str, value: Any) -> int:
    # The one check between a value and the SQL text: an int, and nothing else.
    if type(value) is not int:
        raise TypeError(f"{name} must be an int to be rendered into SQL, not {value!r}")
    return value


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
        or compiled.post_compile_params
        or any(bp.callable is not None for bp in compiled.binds.values())
        or any(
            bp.required and not isinstance(bp.type, Integer)
            for bp in compiled.literal_execute_params
        )
    ):
        return None
    names = compiled.bind_names
    processors = bind_processors(compiled)
    if processors is None:
        return None
    sql = compiled.string
    # literal_execute: a constant (a job status) is rendered now, as SQLAlchemy
    # renders it at execution; a claim's batch size at each execution.
    inlined = []
    for bp in compiled.literal_execute_params:
        if bp.required:
            inlined.append(names[bp])
        else:
            literal = compiled.render_literal_value(bp.value, bp.type)
            sql = sql.replace(f"__[POSTCOMPILE_{names[bp]}]", literal)
    constants = {
        names[bp]: bp.value
        for bp in compiled.binds.values()
        if not bp.required and bp not in compiled.literal_execute_params
    }
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
        return Rendered(sql, constants, processors, _raw(sql), tuple(sorted(set(inlined))))
    return Rendered(sql, constants, processors, None, tuple(sorted(set(inlined))))
