"""Bounded text for the worker's log records and the error history (V4, B2).

A handler's exception may carry anything: a message that echoes a 50 MiB
argument, a traceback thousands of frames deep, a chain of causes.  Every
log record the worker writes about it, and the traceback it stores, is cut
to ``MAX_CHARS`` (the ``last_error`` bound): the message by ``cut``, the
traceback by handing the logger a stand-in for the exception whose
formatting fits (``exc_info``), so any formatter -- the standard one or a
JSON one calling ``formatException`` -- writes a bounded amount.
"""

from __future__ import annotations

import traceback as tb
import types
from dataclasses import dataclass
from typing import Any

from .._values.validate import MAX_ERROR_CHARS, storable_text

__all__ = ["MAX_CHARS", "Trace", "bounded", "cut"]

MAX_CHARS = MAX_ERROR_CHARS
ExcInfo = tuple[type[BaseException], BaseException, types.TracebackType | None]


def cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text``, or its first characters and how many more were cut, in ``limit``."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} more characters cut]"
    return text[: max(limit - len(marker), 0)] + marker


def _str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not break the report
        return f"<{type(exc).__name__}: str() failed>"


def _chain_chars(exc: BaseException) -> int:
    """The characters the messages of ``exc`` and the exceptions it chains take."""
    total, seen, todo = 0, set(), [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        total += len(_str(e))
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return total


def _frames(trace: types.TracebackType | None) -> list[types.TracebackType]:
    frames = []
    while trace is not None:
        frames.append(trace)
        trace = trace.tb_next
    return frames


def _relinked(frames: list[types.TracebackType]) -> types.TracebackType | None:
    """A traceback of just ``frames`` (the originals stay as they were)."""
    head: types.TracebackType | None = None
    for frame in reversed(frames):
        head = types.TracebackType(head, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return head


def _standin(exc: BaseException, frames: list[types.TracebackType], kept: int) -> BaseException:
    """An exception formatted as ``exc`` is, with its message cut, its last ``kept``
    frames and no chained exceptions."""
    cls = type(exc)
    note = "" if kept == len(frames) else f" [traceback: last {kept} of {len(frames)} frames]"
    if exc.__cause__ is not None or exc.__context__ is not None:
        note += " [chained exceptions left out]"
    message = cut(_str(exc), MAX_CHARS // 2 - len(note)) + note

    def text(self: BaseException) -> str:
        return message

    attrs: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__str__": text,
    }
    standin: BaseException = type(cls.__name__, (Exception,), attrs)()
    standin.__suppress_context__ = True
    standin.__traceback__ = _relinked(frames[len(frames) - kept :])
    return standin


@dataclass(frozen=True, slots=True)
class Trace:
    """A handler's exception as the worker reports it, in ``MAX_CHARS`` each.

    ``text``: its formatted traceback (the error history's, B2).  ``exc_info``:
    what log records get -- the exception itself when it fits, else a
    stand-in whose formatting does; the first item is always its own type.
    """

    text: str
    exc_info: ExcInfo


def bounded(exc: BaseException) -> Trace:
    """``exc``'s traceback and log ``exc_info``, each formatted in ``MAX_CHARS``."""
    shown, text = _shown(exc)
    return Trace(text, (type(exc), shown, shown.__traceback__))


def _shown(exc: BaseException) -> tuple[BaseException, str]:
    """``exc`` or a stand-in, and its formatted traceback: at most ``MAX_CHARS``."""
    if _chain_chars(exc) <= MAX_CHARS:
        text = storable_text("".join(tb.format_exception(exc)))
        if len(text) <= MAX_CHARS:
            return exc, text
    frames = _frames(exc.__traceback__)
    kept = len(frames)
    while True:
        standin = _standin(exc, frames, kept)
        text = storable_text("".join(tb.format_exception(standin)))
        if len(text) <= MAX_CHARS or kept == 0:
            return standin, cut(text)
        kept //= 2
