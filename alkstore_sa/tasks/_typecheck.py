"""Run-time checks of task arguments against the function's annotations (V6).

``check(value, hint, where)`` raises ``TypeError`` naming ``where`` (the
parameter, and the path inside it) when ``value`` does not match ``hint``.
What is checked: ``int`` (not ``bool``), ``float`` (an ``int`` too), ``str``,
``bool``, ``None``, ``list``/``tuple``/``Sequence``/``dict``/``Mapping`` of
those (JSON containers: dict keys are ``str``), ``Optional`` and unions,
``Literal``, dataclasses and pydantic models (an instance of the class).
``Any``, a missing annotation, a type variable or any other hint is not
checked here (the envelope's encoding still refuses what JSON cannot hold).

Shared by the defer side (``_task``) and the decode side (``_codec``).
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import sys
import types
import typing
from typing import Any

__all__ = ["check", "check_arguments", "is_model", "type_name"]


def is_model(tp: object) -> bool:
    """``tp`` is a pydantic model class.  pydantic is never imported for this: a
    class can only be a ``BaseModel`` subclass once pydantic has been imported."""
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None)
    return isinstance(base, type) and isinstance(tp, type) and issubclass(tp, base)


def type_name(hint: object) -> str:
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


_SEQUENCES = (list, tuple, cabc.Sequence, cabc.MutableSequence, cabc.Collection, cabc.Iterable)
_MAPPINGS = (dict, cabc.Mapping, cabc.MutableMapping)


def _matches(value: object, hint: object) -> bool | None:
    """True/False when ``hint`` is one this module checks; None when it is not."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        results = [_matches(value, arm) for arm in typing.get_args(hint)]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if origin is typing.Literal:
        return any(value == lit and type(value) is type(lit) for lit in typing.get_args(hint))
    if hint in _SEQUENCES or origin in _SEQUENCES:
        return isinstance(value, list | tuple)
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return isinstance(value, dict)
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or is_model(hint)):
        return isinstance(value, hint)
    return None


def check(value: object, hint: object, where: str) -> None:
    """``TypeError`` naming ``where`` when ``value`` does not match ``hint``."""
    ok = _matches(value, hint)
    if ok is False:
        raise TypeError(f"{where}: expected {type_name(hint)}, got {type(value).__name__}")
    if ok is None:
        return
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        # The arm the value matched at the top may still hold a wrong item.
        errors = []
        for arm in args:
            if _matches(value, arm) is not True:
                continue
            try:
                check(value, arm, where)
            except TypeError as exc:
                errors.append(exc)
            else:
                return
        if errors:
            raise errors[0]
        return
    if origin is tuple and args and args[-1] is not Ellipsis:
        assert isinstance(value, list | tuple)
        if len(value) != len(args):
            raise TypeError(f"{where}: expected {len(args)} items, got {len(value)}")
        for i, (item, arm) in enumerate(zip(value, args, strict=True)):
            check(item, arm, f"{where}[{i}]")
        return
    if origin in _SEQUENCES and args:
        assert isinstance(value, list | tuple)
        for i, item in enumerate(value):
            check(item, args[0], f"{where}[{i}]")
        return
    if origin in _MAPPINGS and len(args) == 2:
        assert isinstance(value, dict)
        for key, item in value.items():
            check(key, args[0], f"{where} key {key!r}")
            check(item, args[1], f"{where}[{key!r}]")


def check_arguments(
    hints: typing.Mapping[str, object], kwargs: typing.Mapping[str, object], where: str
) -> None:
    """Each argument against its parameter's annotation; the first mismatch is a
    ``TypeError`` naming the parameter."""
    for name, value in kwargs.items():
        if name in hints:
            check(value, hints[name], f"{where}: argument {name!r}")
