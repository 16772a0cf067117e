"""The dashboard's HTTP edges: how a GET or a POST handler answers bad input and a
database error, where a form post returns to, and what a URL's parameters mean.

A bad name, id or parameter is a 4xx of one line, never a traceback; the
database away, a statement past its timeout or tables missing is a 503 of one line.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote

from sqlalchemy.exc import DBAPIError
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from .._calls.core import MAX_REQUEUE
from .._db.dashboard import MAX_ID, Group
from .._values.errors import InvalidNameError, SchemaMissingError
from .._values.text import printable
from ._render import LIVE_HEADER, DashboardBase, base_path
from ._security import CSRF_FIELD, cross_site_reason

__all__ = [
    "Refused",
    "action",
    "before_param",
    "group_of",
    "int_param",
    "page",
    "queue_name",
]

D = TypeVar("D", bound=DashboardBase)
# ``type=-``: the group of errors whose exception type is not known.
UNKNOWN_TYPE = "-"
# What a refusal quotes of the value it refuses.
_QUOTED = 40


class Refused(Exception):
    """Answer with ``status`` and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _one_line(message: str, status: int) -> Response:
    return PlainTextResponse(printable(message), status_code=status)


def page(
    fn: Callable[[D, Request], Awaitable[Response]],
) -> Callable[[D, Request], Awaitable[Response]]:
    """A GET handler: a bad or unknown name or id is a 404 of one line, never a traceback."""

    @functools.wraps(fn)
    async def run(self: D, request: Request) -> Response:
        try:
            return await fn(self, request)
        except Refused as exc:
            return _one_line(exc.message, exc.status)
        except InvalidNameError as exc:
            return _one_line(str(exc), 404)
        except (DBAPIError, SchemaMissingError) as exc:
            return _database_error(exc)

    return run


def _database_error(exc: Exception) -> Response:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = detail[0] if detail else type(exc).__name__
    return _one_line(f"database error: {line[:500]}", 503)


def action(
    fn: Callable[[D, Request, FormData], Awaitable[str]],
) -> Callable[[D, Request], Awaitable[Response]]:
    """A POST handler: read-only (403), cross-site (403), bad input (400), then the action."""

    @functools.wraps(fn)
    async def run(self: D, request: Request) -> Response:
        if self.read_only:
            return _one_line("the dashboard is read-only", 403)
        try:
            async with request.form(max_files=0, max_fields=MAX_REQUEUE + 10) as form:
                reason = cross_site_reason(request, form.get(CSRF_FIELD))
                if reason is not None:
                    return _one_line(reason, 403)
                message = await fn(self, request, form)
        except Refused as exc:
            return _one_line(exc.message, exc.status)
        except (InvalidNameError, ValueError, TypeError) as exc:
            return _one_line(str(exc), 400)
        except (DBAPIError, SchemaMissingError) as exc:
            return _database_error(exc)
        self.cache.forget()
        if request.headers.get(LIVE_HEADER):
            return PlainTextResponse(message)
        back = _back(request, form.get("next"))
        sep = "&" if "?" in back else "?"
        done = quote(message, safe="")
        return RedirectResponse(back + sep + f"done={done}", status_code=303)

    return run


def _back(request: Request, wanted: object) -> str:
    """Where a plain form post returns to: the page it came from, never another site.

    Only a path under the mount point; ``//host`` and ``/\\host`` (which
    browsers read as another host) and anything with control characters
    fall back to the overview.
    """
    base = base_path(request)
    if (
        isinstance(wanted, str)
        and wanted.startswith(base + "/")
        and not wanted.startswith(("//", "/\\"))
        and "\\" not in wanted
        and wanted.isprintable()
    ):
        return wanted.split("?done=")[0].split("&done=")[0]
    return base + "/"


def queue_name(request: Request) -> str:
    return str(request.path_params["queue"])


def int_param(value: object, what: str, high: int = MAX_ID) -> int:
    try:
        found = int(str(value))
    except ValueError:
        shown = str(value)[:_QUOTED]
        raise Refused(400, f"{what} must be a whole number, got {shown!r}") from None
    if not 1 <= found <= high:
        raise Refused(400, f"{what} must be between 1 and {high}, got {found}")
    return found


def before_param(request: Request) -> int | None:
    """``?before=``: a page's keyset start (a job id), or None for the newest."""
    raw = request.query_params.get("before")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise Refused(400, "before must be a job id") from None
    if not 1 <= value <= MAX_ID:
        raise Refused(400, "before must be a job id")
    return value


def group_of(values: FormData | dict[str, str] | object) -> Group | None:
    """V2: the error group a page or a form names -- ``error`` (a folded message) and,
    when present, ``type`` (an exception type; ``-``: not known) -- or None for none."""
    get = getattr(values, "get", None)
    if get is None:
        return None
    error, kind = get("error"), get("type")
    if not isinstance(error, str):
        return None
    if not isinstance(kind, str):
        return Group(error)
    return Group(error, None if kind in ("", UNKNOWN_TYPE) else kind, typed=True)
