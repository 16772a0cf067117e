"""The dashboard's routes (W1): pages and actions over a Store or an AsyncStore.

Every page renders in full on a GET; the same GET with the header
``X-Alkstore-Live: 1`` renders only the page's live part, which
``static/live.js`` fetches every second and swaps in (W5: a change shows
within 2 s, no reload, no build step).  Actions are POSTs of plain forms
(W1 fields, ``data-action`` on each form): with JavaScript they are sent by
``fetch`` and the live part refreshes at once; without, the browser posts
and is redirected back (303).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._calls import core as _core
from .._calls.core import MAX_REQUEUE
from .._values.errors import InvalidNameError, SchemaMissingError
from .._values.job import Job, QueueStats
from ..aio import AsyncStore
from ..store import Store
from . import _sql
from ._db import Cache, Cached, Runner, rows
from ._security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    Auth,
    AuthMiddleware,
    cross_site_reason,
    csrf_token,
)
from ._views import ago, chart, duration, number, payload_view, preview, stamp, url_for

__all__ = ["PAGE_SIZE", "create_app"]

HERE = Path(__file__).parent
PAGE_SIZE = 50  # rows per page of every list (W3: bounded)
GROUPS_SHOWN = 50  # dead-letter error groups on one page
WORKERS_SHOWN = 200  # (worker, queue) rows on the workers page
IN_FLIGHT_SHOWN = 100  # in-flight jobs listed, nearest deadline first
DEFAULT_BULK = 1000  # "all matching": how many at most, unless the form says
LIVE_HEADER = "x-alkstore-live"
LIST_STATUSES = ("", "due", "scheduled", "pending", "processing", "dead")
_MAX_ID = 2**63 - 1


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(
    store: Store | AsyncStore, *, read_only: bool = False, auth: Auth | None = None
) -> Starlette:
    """The dashboard as an ASGI app (W1): mount it, or serve it with ``alkstore web``.

    ``read_only``: no action is shown, and every POST is refused with 403.
    ``auth(request) -> bool`` (or an awaitable bool) runs on every request;
    ``False`` gives 401 (``alkstore_sa.web.BasicAuth`` and
    ``basic_auth_from_env()`` are ready ones).
    """
    dashboard = _Dashboard(Runner(store), read_only=read_only)
    middleware = [] if auth is None else [Middleware(AuthMiddleware, auth=auth)]
    return Starlette(routes=dashboard.routes(), middleware=middleware)


def _page(
    fn: Callable[[_Dashboard, Request], Awaitable[Response]],
) -> Callable[[_Dashboard, Request], Awaitable[Response]]:
    """A GET handler: a bad name or id is a 404 of one line, never a traceback."""

    @functools.wraps(fn)
    async def run(self: _Dashboard, request: Request) -> Response:
        try:
            return await fn(self, request)
        except _Refused as exc:
            return PlainTextResponse(exc.message, status_code=exc.status)
        except InvalidNameError as exc:
            return PlainTextResponse(str(exc), status_code=404)
        except (DBAPIError, SchemaMissingError) as exc:
            return _database_error(exc)

    return run


def _database_error(exc: Exception) -> Response:
    """The database away, a statement past its timeout, tables missing: 503, one line."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    line = detail[0] if detail else type(exc).__name__
    return PlainTextResponse(f"database error: {line}", status_code=503)


def _action(
    fn: Callable[[_Dashboard, Request, FormData], Awaitable[str]],
) -> Callable[[_Dashboard, Request], Awaitable[Response]]:
    """A POST handler: read-only (403), cross-site (403), bad input (400), then the action."""

    @functools.wraps(fn)
    async def run(self: _Dashboard, request: Request) -> Response:
        if self.read_only:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        try:
            async with request.form(max_files=0, max_fields=MAX_REQUEUE + 10) as form:
                reason = cross_site_reason(request, form.get(CSRF_FIELD))
                if reason is not None:
                    return PlainTextResponse(reason, status_code=403)
                message = await fn(self, request, form)
        except _Refused as exc:
            return PlainTextResponse(exc.message, status_code=exc.status)
        except (InvalidNameError, ValueError, TypeError) as exc:
            return PlainTextResponse(str(exc), status_code=400)
        except (DBAPIError, SchemaMissingError) as exc:
            return _database_error(exc)
        self.cache.forget()
        if request.headers.get(LIVE_HEADER):
            return PlainTextResponse(message)
        back = _back(request, form.get("next"))
        sep = "&" if "?" in back else "?"
        return RedirectResponse(back + sep + f"done={_quote_message(message)}", status_code=303)

    return run


def _quote_message(message: str) -> str:
    return quote(message, safe="")


def _back(request: Request, wanted: object) -> str:
    """Where a plain form post returns to: the page it came from, never another site.

    Only a path under the mount point; ``//host`` and ``/\\host`` (which
    browsers read as another host) and anything with control characters
    fall back to the overview.
    """
    base = _base(request)
    if (
        isinstance(wanted, str)
        and wanted.startswith(base + "/")
        and not wanted.startswith(("//", "/\\"))
        and "\\" not in wanted
        and wanted.isprintable()
    ):
        return wanted.split("?done=")[0].split("&done=")[0]
    return base + "/"


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _queue_name(request: Request) -> str:
    return str(request.path_params["queue"])


def _int_param(value: object, what: str, high: int = _MAX_ID) -> int:
    try:
        number_ = int(str(value))
    except ValueError:
        raise _Refused(400, f"{what} must be a whole number, got {str(value)[:40]!r}") from None
    if not 1 <= number_ <= high:
        raise _Refused(400, f"{what} must be between 1 and {high}, got {number_}")
    return number_


def _before(request: Request) -> int | None:
    raw = request.query_params.get("before")
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise _Refused(400, "before must be a job id") from None
    if not 1 <= value <= _MAX_ID:
        raise _Refused(400, "before must be a job id")
    return value


class _Dashboard:
    def __init__(self, runner: Runner, *, read_only: bool) -> None:
        self.runner = runner
        self.read_only = read_only
        self.cache = Cache()
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(number=number, duration=duration, stamp=stamp, preview=preview)

    def routes(self) -> list[Route | Mount]:
        static = StaticFiles(directory=HERE / "static")
        return [
            Route("/", self.overview, name="overview"),
            Route("/workers", self.workers, name="workers"),
            Mount("/static", app=static, name="static"),
            # {queue:path}: a queue name may hold "/" (sent as %2F); the
            # suffixes are matched from the right.
            Route("/queues/{queue:path}/jobs/{id:int}/cancel", self.cancel, methods=["POST"]),
            Route("/queues/{queue:path}/jobs/{id:int}", self.job, name="job"),
            Route("/queues/{queue:path}/jobs", self.queue, name="jobs"),
            Route("/queues/{queue:path}/dead", self.dead, name="dead"),
            Route("/queues/{queue:path}/pause", self.pause, methods=["POST"]),
            Route("/queues/{queue:path}/resume", self.resume, methods=["POST"]),
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

    # -- rendering -------------------------------------------------------------------

    def render(self, request: Request, template: str, **context: Any) -> Response:
        base = _base(request)
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

    # -- reads -----------------------------------------------------------------------

    async def _all_stats(self) -> Cached[dict[str, QueueStats]]:
        call = _core.store_stats(self.runner.schema)
        return await self.cache.get(("stats",), lambda: self.runner.read(call))

    async def _queue_stats(self, name: str) -> Cached[QueueStats]:
        call = self.runner.store.queue(name)._core.stats()
        return await self.cache.get(("stats", name), lambda: self.runner.read(call))

    async def _throughput(self, name: str | None) -> list[Any] | None:
        """The last hour's counts; None when the ``throughput`` table (0006) is not there."""
        schema = self.runner.schema
        stmt = _sql.throughput_last_hour(name is not None)
        params = {} if name is None else {"p_queue": name}

        async def read() -> list[Any]:
            return await self.runner.read(lambda conn: rows(conn, schema, stmt, params))

        try:
            cached = await self.cache.get(("throughput", name), read)
        except SchemaMissingError:
            return None  # the rest of the dashboard works on a schema before 0006
        return cached.value

    async def _now(self) -> datetime:
        schema = self.runner.schema
        [(now,)] = await self.runner.read(lambda conn: rows(conn, schema, _sql.now(), {}))
        return now  # type: ignore[no-any-return]

    # -- pages -----------------------------------------------------------------------

    @_page
    async def overview(self, request: Request) -> Response:
        stats = await self._all_stats()
        tp = await self._throughput(None)
        now = await self._now()
        totals = {
            field: sum(getattr(s, field) for s in stats.value.values())
            for field in ("due", "scheduled", "processing", "lapsed", "expired", "dead")
        }
        return self.render(
            request,
            "overview.html",
            title="Queues",
            now=now,
            stats=stats,
            totals=totals,
            chart=None if tp is None else chart(tp, now),
        )

    @_page
    async def queue(self, request: Request) -> Response:
        name = _queue_name(request)
        q = self.runner.store.queue(name)  # validates the name (404 when invalid)
        status = request.query_params.get("status", "")
        if status not in LIST_STATUSES:
            raise _Refused(400, f"status must be one of {', '.join(s for s in LIST_STATUSES if s)}")
        before = _before(request)
        stats = await self._queue_stats(name)
        schema = self.runner.schema
        core = q._core

        def read(conn: Connection) -> tuple[datetime, list[Job]]:
            [(now,)] = rows(conn, schema, _sql.now(), {})
            if status in ("due", "scheduled"):
                params = {"p_queue": name, "p_before": before, "p_limit": PAGE_SIZE + 1}
                found = rows(conn, schema, _sql.pending_page(status == "due"), params)
                jobs = [Job.from_row(r) for r in found]
            else:
                jobs = core.jobs(status or None, PAGE_SIZE + 1, before)(conn)
            return now, jobs

        now, jobs = await self.runner.read(read)
        tp = await self._throughput(name)
        return self.render(
            request,
            "queue.html",
            title=name,
            name=name,
            now=now,
            stats=stats,
            status=status,
            statuses=LIST_STATUSES,
            jobs=jobs[:PAGE_SIZE],
            next_before=jobs[PAGE_SIZE - 1].id if len(jobs) > PAGE_SIZE else None,
            before=before,
            chart=None if tp is None else chart(tp, now),
        )

    @_page
    async def dead(self, request: Request) -> Response:
        name = _queue_name(request)
        q = self.runner.store.queue(name)
        before = _before(request)
        error = request.query_params.get("error")
        schema = self.runner.schema
        core = q._core

        def read(conn: Connection) -> tuple[datetime, list[Any], list[Job]]:
            [(now,)] = rows(conn, schema, _sql.now(), {})
            groups = rows(
                conn, schema, _sql.dead_groups(), {"p_queue": name, "p_limit": GROUPS_SHOWN}
            )
            if error is None:
                jobs = core.jobs("dead", PAGE_SIZE + 1, before)(conn)
            else:
                params = {
                    "p_queue": name,
                    "p_error": error,
                    "p_before": before,
                    "p_limit": PAGE_SIZE + 1,
                }
                found = rows(conn, schema, _sql.dead_page_matching(), params)
                jobs = [Job.from_row(r) for r in found]
            return now, groups, jobs

        now, groups, jobs = await self.runner.read(read)
        stats = await self._queue_stats(name)
        grouped = sum(g.n for g in groups)
        return self.render(
            request,
            "dead.html",
            title=f"{name}: dead letters",
            name=name,
            now=now,
            stats=stats,
            groups=groups,
            grouped=grouped,
            window=_sql.GROUP_WINDOW,
            error=error,
            jobs=jobs[:PAGE_SIZE],
            next_before=jobs[PAGE_SIZE - 1].id if len(jobs) > PAGE_SIZE else None,
            before=before,
            bulk=DEFAULT_BULK,
            max_bulk=MAX_REQUEUE,
        )

    @_page
    async def job(self, request: Request) -> Response:
        name = _queue_name(request)
        q = self.runner.store.queue(name)
        job_id = request.path_params["id"]
        if not 1 <= job_id <= _MAX_ID:
            raise _Refused(404, "no such job")
        schema = self.runner.schema
        get = q._core.get_job(job_id)

        def read(conn: Connection) -> tuple[datetime, Job | None]:
            [(now,)] = rows(conn, schema, _sql.now(), {})
            return now, get(conn)

        now, job = await self.runner.read(read)
        if job is None:
            return PlainTextResponse(
                f"no job {job_id} in queue {name!r} (acked, purged, or never there)",
                status_code=404,
            )
        return self.render(
            request,
            "job.html",
            title=f"{name}: job {job_id}",
            name=name,
            now=now,
            job=job,
            payload=payload_view(job.payload),
        )

    @_page
    async def workers(self, request: Request) -> Response:
        schema = self.runner.schema

        def read(conn: Connection) -> tuple[datetime, list[Any], list[Any]]:
            [(now,)] = rows(conn, schema, _sql.now(), {})
            summary = rows(conn, schema, _sql.in_flight_summary(), {"p_limit": WORKERS_SHOWN})
            jobs = rows(conn, schema, _sql.in_flight(), {"p_limit": IN_FLIGHT_SHOWN})
            return now, summary, jobs

        now, summary, jobs = await self.runner.read(read)
        return self.render(
            request,
            "workers.html",
            title="Workers",
            now=now,
            summary=summary,
            jobs=jobs,
            summary_limit=WORKERS_SHOWN,
            jobs_limit=IN_FLIGHT_SHOWN,
        )

    # -- actions (W3: public API only) ----------------------------------------------

    @_action
    async def pause(self, request: Request, form: FormData) -> str:
        name = _queue_name(request)
        changed = await self.runner.act(name, lambda q, s: q.pause(session=s))
        return f"paused {name}" if changed else f"{name} was already paused"

    @_action
    async def resume(self, request: Request, form: FormData) -> str:
        name = _queue_name(request)
        changed = await self.runner.act(name, lambda q, s: q.resume(session=s))
        return f"resumed {name}" if changed else f"{name} was not paused"

    @_action
    async def requeue(self, request: Request, form: FormData) -> str:
        name = _queue_name(request)
        ids, limit, error = self._selection(form)
        schema = self.runner.schema

        def requeue(q: Any, session: Any) -> Any:
            if ids is not None:
                return q.requeue_dead(ids, limit=max(len(ids), 1), session=session)
            if error is None:
                return q.requeue_dead(None, limit=limit, session=session)
            return _then(
                _matching_ids(q, session, schema, name, error, limit),
                lambda found: q.requeue_dead(found, session=session),
            )

        moved = await self.runner.act(name, requeue)
        return f"requeued {moved} job(s)"

    @_action
    async def purge(self, request: Request, form: FormData) -> str:
        name = _queue_name(request)
        ids, limit, error = self._selection(form)
        schema = self.runner.schema

        def purge(q: Any, session: Any) -> Any:
            if ids is not None:
                return q.purge_dead(ids, session=session)
            return _then(
                _matching_ids(q, session, schema, name, error, limit, any_error=error is None),
                lambda found: q.purge_dead(found, session=session),
            )

        gone = await self.runner.act(name, purge)
        return f"purged {gone} dead job(s)"

    @_action
    async def cancel(self, request: Request, form: FormData) -> str:
        name = _queue_name(request)
        job_id = _int_param(request.path_params["id"], "job id")
        # Queue.cancel takes no session=: its own call, in the dashboard's timed transaction.
        call = self.runner.store.queue(name)._core.cancel(job_id)
        done = await self.runner.read(call)
        return f"cancelled job {job_id}" if done else f"job {job_id} was not pending or processing"

    def _selection(self, form: FormData) -> tuple[list[int] | None, int, str | None]:
        """W1's fields: ``id`` repeated, or ``all=1`` with ``limit`` (and ``error``, one group)."""
        raw_ids = form.getlist("id")
        everything = form.get("all") == "1"
        if raw_ids and everything:
            raise _Refused(400, "give ids or all=1, not both")
        if not raw_ids and not everything:
            raise _Refused(400, "select at least one job (or all=1)")
        if len(raw_ids) > MAX_REQUEUE:
            raise _Refused(400, f"at most {MAX_REQUEUE} ids at once")
        limit_raw = form.get("limit") or str(DEFAULT_BULK)
        limit = _int_param(limit_raw, "limit", MAX_REQUEUE)
        error = form.get("error")
        ids = [_int_param(i, "id") for i in raw_ids] if raw_ids else None
        return ids, limit, error if isinstance(error, str) else None


def _matching_ids(
    q: Any,
    session: Any,
    schema: str,
    name: str,
    error: str | None,
    limit: int,
    *,
    any_error: bool = False,
) -> Any:
    """The oldest ``limit`` dead ids of the queue (of one error group unless ``any_error``).

    Read in the action's own transaction, so the ids and the move agree.
    """
    stmt = _sql.dead_ids_oldest() if any_error else _sql.dead_ids_matching()
    params: dict[str, Any] = {"p_queue": name, "p_limit": limit}
    if not any_error:
        params["p_error"] = error

    def read(conn: Connection) -> list[int]:
        return [r[0] for r in rows(conn, schema, stmt, params)]

    if isinstance(session, Connection):
        return read(session)
    return session.run_sync(read)


def _then(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn(value)``, awaiting either side when the async face handed back an awaitable."""
    if inspect.isawaitable(value):

        async def chain() -> Any:
            result = fn(await value)
            return await result if inspect.isawaitable(result) else result

        return chain()
    return fn(value)
