"""What a handler is: its calling convention, and how its outcome is worded.

A handler takes ``(job)`` or ``(job, session)``; which one is read from its
signature once, when the worker is built, so a wrong handler fails before
anything is claimed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

from .._values.validate import stored_text

__all__ = [
    "HandlerSpec",
    "Scope",
    "awaited_in",
    "called_in",
    "exception_text",
    "inspect_handler",
    "returned_awaitable",
    "scoped",
    "stored_error",
]

T = TypeVar("T")
# The observers' scope around a handler's run (B3 spans), None for none.
Scope = AbstractContextManager[object] | None


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """A handler and how to call it."""

    fn: Callable[..., Any]
    is_async: bool
    wants_session: bool
    name: str


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):  # unwraps functools.partial
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 -- callable objects
    return call is not None and inspect.iscoroutinefunction(call)


def _positional_arity(fn: Callable[..., Any]) -> tuple[int, int, bool]:
    """(required positional, all positional, takes *args) of ``fn``."""
    sig = inspect.signature(fn)
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    return len(required), len(positional), varargs


def inspect_handler(fn: object, where: str) -> HandlerSpec:
    """Validate ``fn`` and decide ``(job)`` versus ``(job, session)``.

    Two required positional parameters mean a session-scoped handler; one
    (or one plus optional ones, or ``*args``) means a plain handler.
    """
    if not callable(fn):
        raise TypeError(f"{where}: handler must be callable, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if isinstance(fn, functools.partial):
        name = getattr(fn.func, "__qualname__", name)
    try:
        required, positional, varargs = _positional_arity(fn)
    except (TypeError, ValueError):
        # No introspectable signature (some builtins): call it with the job alone.
        return HandlerSpec(fn, _is_coroutine_function(fn), False, name)
    if required == 2:
        wants_session = True
    elif required == 1 or (required == 0 and (positional >= 1 or varargs)):
        wants_session = False
    else:
        raise TypeError(
            f"{where}: handler {name} must take (job) or (job, session); "
            f"it has {required} required positional parameters"
        )
    return HandlerSpec(fn, _is_coroutine_function(fn), wants_session, name)


def stored_error(error: object) -> str | None:
    """The error a handler gave (``FailJob``/``RetryJob``) as ``last_error``.

    Unlike the handle methods' ``error`` argument, which must be a string, a
    handler may raise with any object: it is stored as its ``str()``, NULs
    dropped, lone surrogates escaped, cut to ``validate.MAX_ERROR_CHARS``.
    """
    if error is None:
        return None
    return stored_text(error if isinstance(error, str) else str(error))


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or the exception's type name when that is empty."""
    text = stored_error(str(exc)) or ""
    return text if text.strip() else type(exc).__name__


def returned_awaitable(spec: HandlerSpec, result: object) -> TypeError:
    """The error for a sync-called handler that returned an awaitable it cannot run.

    An ``async def`` behind a plain sync decorator looks sync to the
    signature check; its body only runs when awaited, so acking here would
    record work that never happened.  The coroutine is closed so Python does
    not warn that it was never awaited.
    """
    close = getattr(result, "close", None)
    if inspect.iscoroutine(result) and callable(close):
        close()
    return TypeError(
        f"handler {spec.name} returned a coroutine ({type(result).__name__}) instead of "
        "running; async handlers must be run by AsyncWorker"
    )


def scoped(fn: Callable[[], T], scope: Scope) -> Callable[[], T]:
    """``fn`` to be called inside ``scope`` (if any), on whatever thread runs it."""
    return fn if scope is None else functools.partial(called_in, scope, fn)


def called_in(scope: AbstractContextManager[object], fn: Callable[[], T]) -> T:
    """``fn()`` inside ``scope``, on whatever thread runs it (a handler's scope)."""
    with scope:
        return fn()


async def awaited_in(scope: AbstractContextManager[object], awaitable: Awaitable[T]) -> T:
    """``await awaitable`` inside ``scope``, in the task that awaits it."""
    with scope:
        return await awaitable
