"""The task envelope (T1): ``{"v": 1, "task": NAME, "kwargs": {...}}`` as JSON bytes.

The envelope is the one thing a producer in another language needs to
know, so it is plain JSON with no Python-specific encoding: keyword
arguments are JSON values; a parameter annotated with a dataclass (or a
pydantic model) travels as the object's fields and is rebuilt as that type
on the worker, from the function's annotations.  Everything is checked
when the job is deferred, so a bad argument is a ``TypeError`` before any
SQL, never a job that can only fail.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._values.errors import InvalidEnvelope
from ._typecheck import is_model

__all__ = [
    "ENVELOPE_VERSION",
    "InvalidEnvelope",
    "Signature",
    "decode_envelope",
    "encode_envelope",
]

ENVELOPE_VERSION = 1


# The deepest nesting an envelope may have: far beyond any real argument,
# and far below what json's recursion (and the rebuilding after it) can take.
MAX_DEPTH = 100


def _is_model(tp: object) -> bool:
    # pydantic is never imported for this (V3): see _typecheck.is_model.
    return is_model(tp)


def _is_dataclass_type(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _structured(hint: object) -> tuple[type | None, bool]:
    """(the dataclass or model a hint names, whether None is allowed too)."""
    if _is_dataclass_type(hint) or _is_model(hint):
        return typing.cast(type, hint), False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            inner, _ = _structured(rest[0])
            return inner, True
    return None, False


def _plain(value: object, where: str) -> Any:
    """``value`` as JSON-ready data, or ``TypeError`` naming where it cannot go."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {value!r} cannot be encoded as JSON")
        return value
    if isinstance(value, list | tuple):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: dict keys must be str, got {type(key).__name__}")
            out[key] = _plain(item, f"{where}[{key!r}]")
        return out
    raise TypeError(
        f"{where}: a {type(value).__name__} cannot be encoded as JSON "
        "(task arguments are JSON values, or dataclasses/pydantic models for "
        "parameters annotated with them)"
    )


def _dump_structured(value: object, tp: type, where: str) -> Any:
    if not isinstance(value, tp):
        raise TypeError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    if _is_model(tp):
        return json.loads(typing.cast(Any, value).model_dump_json())
    fields = {}
    for f in dataclasses.fields(typing.cast(Any, value)):
        item = getattr(value, f.name)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields[f.name] = _dump_structured(item, type(item), f"{where}.{f.name}")
        else:
            fields[f.name] = _plain(item, f"{where}.{f.name}")
    return fields


def _load_structured(data: object, tp: type, where: str) -> Any:
    if _is_model(tp):
        return typing.cast(Any, tp).model_validate(data)
    if not isinstance(data, dict):
        raise TypeError(f"{where}: expected an object for {tp.__name__}, got {type(data).__name__}")
    try:
        hints = typing.get_type_hints(tp)
    except Exception:  # unresolvable annotations: fields as they came
        hints = {}
    built = {}
    for key, item in data.items():
        hint = hints.get(key)
        inner, _ = _structured(hint)
        if inner is not None and item is not None:
            built[key] = _load_structured(item, inner, f"{where}.{key}")
        elif hint is not None and not _conforms(item, hint):
            # The check defer makes (V6), made on the way back in: a field a
            # foreign producer (or an older deploy) filled with the wrong type
            # never reaches the task.
            raise TypeError(f"{where}.{key}: expected {_hint_name(hint)}, got {item!r:.80}")
        else:
            built[key] = item
    return tp(**built)


def _hint_name(hint: object) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _conforms(value: object, hint: object) -> bool:
    """Whether decoded JSON ``value`` fits annotation ``hint`` (V6's types; others pass)."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # JSON writes 1.0 as 1
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(args) == len(value) and all(map(_conforms, value, args))
        item = args[0] if args else Any
        return all(_conforms(v, item) for v in value)
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            return False
        item = args[1] if len(args) == 2 else Any
        return all(_conforms(v, item) for v in value.values())
    inner, _ = _structured(hint)
    if inner is not None:
        return isinstance(value, dict)
    return True  # a type V6 does not judge


@dataclass(frozen=True)
class Signature:
    """What a task function accepts, read once at registration."""

    signature: inspect.Signature
    structured: Mapping[str, tuple[type, bool]]
    takes_session: bool
    # R2: the dataclass or model the return annotation names (and whether None is allowed).
    returns: tuple[type, bool] | None = None

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Signature:
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind is p.POSITIONAL_ONLY:
                raise TypeError(
                    f"task {fn.__qualname__}: parameter {p.name!r} is positional-only; "
                    "task arguments travel by name"
                )
            if p.kind is p.VAR_POSITIONAL:
                raise TypeError(
                    f"task {fn.__qualname__}: *{p.name} cannot be deferred; "
                    "task arguments travel by name"
                )
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # forward references that do not resolve: no rebuilding
            hints = {}
        structured = {}
        for name in sig.parameters:
            tp, optional = _structured(hints.get(name))
            if tp is not None:
                structured[name] = (tp, optional)
        rtp, roptional = _structured(hints.get("return"))
        returns = None if rtp is None else (rtp, roptional)
        return cls(sig, structured, "session" in sig.parameters, returns)

    def dump_result(self, value: object, where: str) -> bytes:
        """R2: a return value as the job's result: compact JSON, UTF-8 (T1's rules)."""
        here = f"{where}: return value"
        kind = self.returns
        if kind is not None and not (value is None and kind[1]):
            data = _dump_structured(value, kind[0], here)
        else:
            data = _plain(value, here)
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()

    def load_result(self, result: bytes | None, where: str) -> Any:
        """R2: a kept result decoded, a dataclass or model return annotation rebuilt."""
        if result is None:
            return None
        data = json.loads(result)
        kind = self.returns
        if kind is not None and data is not None:
            return _load_structured(data, kind[0], f"{where}: result")
        return data

    def bind(self, kwargs: Mapping[str, object], where: str) -> None:
        """``TypeError`` for an unknown or missing parameter (``session`` is the worker's)."""
        if self.takes_session and "session" in kwargs:
            raise TypeError(f"{where}: 'session' is given by the worker, not deferred")
        supplied = dict(kwargs)
        if self.takes_session:
            supplied["session"] = None
        try:
            self.signature.bind(**supplied)
        except TypeError as exc:
            raise TypeError(f"{where}: {exc}") from None

    def dump(self, kwargs: Mapping[str, object], where: str) -> dict[str, Any]:
        """The arguments as JSON-ready data (``TypeError`` for what cannot be encoded)."""
        out = {}
        for name, value in kwargs.items():
            here = f"{where}: argument {name!r}"
            kind = self.structured.get(name)
            if kind is not None and not (value is None and kind[1]):
                out[name] = _dump_structured(value, kind[0], here)
            else:
                out[name] = _plain(value, here)
        return out

    def load(self, kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The arguments as the function takes them: dataclasses and models rebuilt."""
        self.bind(kwargs, where)
        out = {}
        for name, value in kwargs.items():
            kind = self.structured.get(name)
            if kind is not None and value is not None:
                out[name] = _load_structured(value, kind[0], f"{where}: argument {name!r}")
            else:
                out[name] = value
        return out


def encode_envelope(name: str, data: Mapping[str, Any]) -> bytes:
    """The payload: compact JSON, UTF-8."""
    envelope = {"v": ENVELOPE_VERSION, "task": name, "kwargs": data}
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _refuse_constant(name: str) -> Any:
    """NaN and the infinities are not JSON, and ``encode_envelope`` never writes them."""
    raise ValueError(f"{name} is not a JSON value")


def _too_deep(value: object) -> bool:
    """Whether ``value`` nests containers deeper than MAX_DEPTH (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def decode_envelope(payload: bytes) -> tuple[str, dict[str, Any]]:
    """(task name, kwargs) of a version-1 envelope; ``InvalidEnvelope`` says what is wrong.

    Keys other than ``v``, ``task`` and ``kwargs`` are ignored, so a later
    producer may add some without breaking this worker.
    """
    try:
        envelope = json.loads(payload, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidEnvelope(f"nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidEnvelope(f"not JSON ({exc})") from None
    if _too_deep(envelope):
        raise InvalidEnvelope(f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(envelope, dict):
        raise InvalidEnvelope(f"expected a JSON object, got {type(envelope).__name__}")
    version = envelope.get("v")
    if version != ENVELOPE_VERSION or isinstance(version, bool):
        raise InvalidEnvelope(f"unsupported envelope version {version!r} (expected 1)")
    name = envelope.get("task")
    if not isinstance(name, str) or not name:
        raise InvalidEnvelope("'task' must be a non-empty string")
    kwargs = envelope.get("kwargs")
    if not isinstance(kwargs, dict):
        raise InvalidEnvelope("'kwargs' must be a JSON object")
    return name, kwargs
