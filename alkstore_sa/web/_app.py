"""The dashboard as an ASGI app (W1): ``create_app`` and its routes.

Every page renders in full on a GET; the same GET with the header
``X-Alkstore-Live: 1`` renders only the page's live part, which
``static/live.js`` fetches every second and swaps in (W5: a change shows
within 2 s, no reload, no build step).  Actions are POSTs of plain forms
(W1 fields, ``data-action`` on each form): with JavaScript they are sent by
``fetch`` and the live part refreshes at once; without, the browser posts
and is redirected back (303).  The pages are ``_pages.py``, the actions
``_actions.py``, what a request may do ``_security.py``.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ..aio import AsyncStore
from ..store import Store
from ._actions import Actions
from ._db import Runner
from ._pages import PAGE_SIZE, Pages
from ._render import HERE
from ._security import Auth, AuthMiddleware, LoopbackOnly, SecurityHeaders

__all__ = ["PAGE_SIZE", "create_app"]

log = logging.getLogger("alkstore_sa.web")

OPEN_WARNING = (
    "alkstore dashboard created with no auth and not read-only: anyone who reaches it "
    "can pause, requeue, purge and cancel; only requests addressed to localhost, "
    "127.0.0.1 or [::1] are answered (pass auth=, or read_only=True; see docs/web.md)"
)


class _App(Starlette):
    """Starlette with ``SecurityHeaders`` outside its whole stack, so its own error
    responses (a 500 from ``ServerErrorMiddleware`` too) carry the headers."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(
    store: Store | AsyncStore, *, read_only: bool = False, auth: Auth | None = None
) -> Starlette:
    """The dashboard as an ASGI app (W1): mount it, or serve it with ``alkstore web``.

    ``read_only``: no action is shown, and every POST is refused with 403.
    ``auth(request) -> bool`` (or an awaitable bool) runs on every request;
    ``False`` gives 401 (``alkstore_sa.web.BasicAuth`` and
    ``basic_auth_from_env()`` are ready ones).  With no ``auth`` the app
    answers only requests addressed to a loopback host (403 otherwise), and,
    unless ``read_only``, logs a warning once, here.
    """
    dashboard = _Dashboard(Runner(store), read_only=read_only)
    if auth is None:
        middleware = [Middleware(LoopbackOnly)]
        if not read_only:
            log.warning(OPEN_WARNING)
    else:
        middleware = [Middleware(AuthMiddleware, auth=auth)]
    return _App(routes=dashboard.routes(), middleware=middleware)


class _Dashboard(Pages, Actions):
    def routes(self) -> list[Route | Mount]:
        static = StaticFiles(directory=HERE / "static")
        return [
            Route("/", self.overview, name="overview"),
            Route("/workers", self.workers, name="workers"),
            Route("/workflows/{id:int}", self.workflow, name="workflow"),
            Mount("/static", app=static, name="static"),
            # {queue:path}: a queue name may hold "/" (sent as %2F); the
            # suffixes are matched from the right.
            Route("/queues/{queue:path}/jobs/{id:int}/cancel", self.cancel, methods=["POST"]),
            Route("/queues/{queue:path}/jobs/{id:int}", self.job, name="job"),
            Route("/queues/{queue:path}/jobs", self.queue, name="jobs"),
            Route("/queues/{queue:path}/dead", self.dead, name="dead"),
            Route("/queues/{queue:path}/pause", self.pause, methods=["POST"]),
            Route("/queues/{queue:path}/resume", self.resume, methods=["POST"]),
            Route("/queues/{queue:path}/limits", self.set_limits, methods=["POST"]),
            Route("/queues/{queue:path}/requeue", self.requeue, methods=["POST"]),
            Route("/queues/{queue:path}/purge", self.purge, methods=["POST"]),
            Route("/queues/{queue:path}", self.queue, name="queue"),
            *self._metrics(),
        ]

    def _metrics(self) -> list[Mount]:
        """B4: the queue gauges at ``/metrics`` when the prometheus extra is installed."""
        try:
            from ..prometheus import metrics_app
        except ImportError:
            return []
        return [Mount("/metrics", app=metrics_app(self.runner.store, registry=None))]
