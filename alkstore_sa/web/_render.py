"""Turning a page's values into HTML: the templates, their filters, the CSRF cookie.

Every value a template prints is escaped twice over: HTML autoescaping, and
before it, ``printable`` (``_values/text.py``), which spells control, bidi
and format characters (ESC, U+202E...) as visible escapes, so a forged
``last_error`` can neither hide text nor reorder it on the page.
"""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._values.text import printable
from ._db import Cache, Runner
from ._security import CSRF_COOKIE, CSRF_FIELD, csrf_token
from ._views import ago, duration, number, preview, stamp, task_name, url_for

__all__ = ["HERE", "LIVE_HEADER", "DashboardBase", "base_path"]

HERE = Path(__file__).parent
LIVE_HEADER = "x-alkstore-live"


def base_path(request: Request) -> str:
    """The mount point ('' at the root): every link and redirect starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _shown(value: Any) -> Any:
    """Jinja's ``finalize``: text (never markup already rendered) through ``printable``."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable(value, keep_newlines=True)
    return value


class DashboardBase:
    """What pages and actions share: the runner, the counts cache, the templates."""

    def __init__(self, runner: Runner, *, read_only: bool) -> None:
        self.runner = runner
        self.read_only = read_only
        self.cache = Cache()
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=_shown,
        )
        self.env.filters.update(
            number=number, duration=duration, stamp=stamp, preview=preview, task_name=task_name
        )

    def render(self, request: Request, template: str, **context: Any) -> Response:
        base = base_path(request)
        live = bool(request.headers.get(LIVE_HEADER))
        token = csrf_token(request)
        now: datetime = context["now"]
        values = {
            "base": base,
            "u": functools.partial(url_for, base),
            "read_only": self.read_only,
            "csrf": token,
            "csrf_field": CSRF_FIELD,
            "live": live,
            "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            "done": request.query_params.get("done"),
            "ago": lambda when: ago(when, now),
            "schema": self.runner.schema,
            **context,
        }
        html = self.env.get_template(template).render(values)
        response = HTMLResponse(html, headers={"Cache-Control": "no-store"})
        if getattr(request.state, "csrf_new", False):
            response.set_cookie(
                CSRF_COOKIE,
                token,
                path=(base or "") + "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response
