"""Resolve ``MODULE:OBJ`` the way uvicorn and celery do: import, then walk attributes."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any

from ._db import CliError

__all__ = ["call_factory", "load_object"]


def load_object(spec: str) -> object:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"{spec!r} is not MODULE:OBJ (for example myapp.tasks:worker)", code=2)
    # `alkstore` is a console script: its sys.path[0] is the script's directory,
    # not the cwd, so a user's `myapp.tasks` would not be found without this.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise CliError(
                f"cannot import {module_name!r} (from {spec!r}): no module named {missing!r} "
                f"on the path (run from the directory that contains it?)",
                code=2,
            ) from None
        raise  # a dependency missing inside the user's module: their traceback helps them
    done: list[str] = []
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = f"{module_name}:{'.'.join(done)}" if done else f"module {module_name!r}"
            raise CliError(
                f"cannot resolve {spec!r}: {where} has no attribute {part!r}", code=2
            ) from None
        done.append(part)
    return obj


def call_factory(
    spec: str,
    factory: Any,
    wanted: str,
    *,
    kwargs: Mapping[str, Any] | None = None,
    label: str = "",
) -> object:
    """Call the function ``spec`` names to make a ``wanted``; refuse one that needs arguments.

    ``alkstore worker myapp.tasks:send_email`` names a handler, which takes a
    job: calling it would end in a ``TypeError`` traceback from the user's
    code.  Its signature tells, before the call, that it is not a factory.
    """
    kwargs = dict(kwargs or {})
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read (some builtins): just call it
        return factory(**kwargs)
    try:
        signature.bind(**kwargs)
    except TypeError:
        name = getattr(factory, "__name__", type(factory).__name__)
        bare = signature.replace(
            parameters=[
                p.replace(annotation=p.empty, default=p.empty)
                for p in signature.parameters.values()
            ],
            return_annotation=signature.empty,
        )
        raise CliError(
            f"{label}{spec!r} is {name}{bare}, a function that needs arguments: name {wanted}, "
            "or a function returning one that can be called without arguments",
            code=2,
        ) from None
    return factory(**kwargs)
