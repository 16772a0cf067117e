"""The dashboard's pages (W1, W2, V2): overview, queue, dead letters, job, workers.

Each is one GET; the same GET with ``X-Alkstore-Live: 1`` renders only the
live part (``static/live.js`` refreshes it every second).  Every list is a
bounded page and every long text is cut (its length shown), so a live
refresh is bounded however big the rows are.  A queue nobody knows (no row,
no pause, no throughput in the last hour) and a job that is not there are
404s, like a malformed path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from starlette.requests import Request
from starlette.responses import Response

from .._calls import admin as _admin
from .._calls import workers as worker_calls
from .._calls import workflow as workflow_calls
from .._calls.core import MAX_REQUEUE
from .._db import dashboard as reads
from .._db.address import StoreAddress
from .._values.errors import SchemaMissingError
from .._values.job import Job, QueueStats
from .._values.workers import WorkerInfo
from ._db import Cached
from ._http import Refused, before_param, group_of, page, queue_name
from ._render import DashboardBase
from ._views import chart, payload_view

__all__ = ["PAGE_SIZE", "Pages"]

PAGE_SIZE = 50  # rows per page of every list (W3: bounded)
GROUPS_SHOWN = 50  # dead-letter error groups on one page
WORKERS_SHOWN = 200  # (worker, queue) rows on the workers page
WORKFLOW_STEPS_SHOWN = 2_000  # steps listed on a workflow's page
IN_FLIGHT_SHOWN = 100  # in-flight jobs listed, nearest deadline first
DEFAULT_BULK = 1000  # "all matching": how many at most, unless the form says
LIST_STATUSES = ("", "due", "scheduled", "pending", "processing", "completed", "dead")
# How much of a long text a page shows: in a list's cell, on the job page,
# and on the job page asked for in full (``?full=1``).
CELL_TEXT = 200
JOB_TEXT = 2_000
FULL_TEXT = 64 * 1024
TEXT_LIMITS = {"cell": CELL_TEXT, "job": JOB_TEXT, "full": FULL_TEXT}


class Pages(DashboardBase):
    """The GET handlers."""

    # -- reads -----------------------------------------------------------------------

    @property
    def _address(self) -> StoreAddress:
        return StoreAddress(self.runner.schema)

    async def _all_stats(self) -> Cached[dict[str, QueueStats]]:
        schema = self.runner.schema
        try:
            call = _admin.store_stats(schema, recent=True)
            return await self.cache.get(("stats",), lambda: self.runner.read(call))
        except SchemaMissingError:  # before 0006: no throughput table to list queues from
            call = _admin.store_stats(schema)
            return await self.cache.get(("stats before 0006",), lambda: self.runner.read(call))

    async def _queue_stats(self, name: str) -> Cached[QueueStats]:
        call = self.runner.queue_core(name).stats()
        return await self.cache.get(("stats", name), lambda: self.runner.read(call))

    async def _throughput(self, name: str | None) -> list[reads.Minute] | None:
        """The last hour's counts; None when the ``throughput`` table (0006) is not there."""
        address = self._address

        async def read() -> list[reads.Minute]:
            return await self.runner.read(lambda conn: reads.throughput(conn, address, name))

        try:
            cached = await self.cache.get(("throughput", name), read)
        except SchemaMissingError:
            return None  # the rest of the dashboard works on a schema before 0006
        return cached.value

    async def _now(self) -> datetime:
        address = self._address
        return await self.runner.read(lambda conn: reads.clock(conn, address))

    async def _known_queue(self, name: str) -> tuple[Cached[QueueStats], list[Any] | None]:
        """The queue's stats and throughput; a 404 when it has neither rows, a pause nor
        throughput in the last hour (V2: ``/queues/nosuch`` is not a page)."""
        stats = await self._queue_stats(name)
        tp = await self._throughput(name)
        s = stats.value
        known = s.due or s.scheduled or s.processing or s.expired or s.completed or s.dead
        if not (known or s.paused or s.limits is not None or tp):
            raise Refused(
                404, f"no queue {name!r} (no jobs, dead letters, pause or recent throughput)"
            )
        return stats, tp

    def _render_text(self, request: Request, template: str, **context: Any) -> Response:
        full = request.query_params.get("full") == "1"
        limits = {**TEXT_LIMITS, "job": FULL_TEXT if full else JOB_TEXT}
        return self.render(request, template, limits=limits, full=full, **context)

    # -- pages -----------------------------------------------------------------------

    @page
    async def overview(self, request: Request) -> Response:
        stats = await self._all_stats()
        tp = await self._throughput(None)
        now = await self._now()
        totals = {
            field: sum(getattr(s, field) for s in stats.value.values())
            for field in ("due", "scheduled", "processing", "lapsed", "expired", "dead")
        }
        return self._render_text(
            request,
            "overview.html",
            title="Queues",
            now=now,
            stats=stats,
            totals=totals,
            chart=None if tp is None else chart(tp, now),
        )

    @page
    async def queue(self, request: Request) -> Response:
        name = queue_name(request)
        core = self.runner.queue_core(name)  # validates the name (404 when invalid)
        status = request.query_params.get("status", "")
        if status not in LIST_STATUSES:
            raise Refused(400, f"status must be one of {', '.join(s for s in LIST_STATUSES if s)}")
        before = before_param(request)
        stats, tp = await self._known_queue(name)
        address = self._address

        def read(conn: Connection) -> tuple[datetime, list[Job]]:
            now = reads.clock(conn, address)
            if status in ("due", "scheduled"):
                due = status == "due"
                jobs = reads.pending_page(conn, address, name, due, before, PAGE_SIZE + 1)
            else:
                jobs = core.jobs(status or None, PAGE_SIZE + 1, before)(conn)
            return now, jobs

        now, jobs = await self.runner.read(read)
        return self._render_text(
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

    @page
    async def dead(self, request: Request) -> Response:
        name = queue_name(request)
        core = self.runner.queue_core(name)
        before = before_param(request)
        group = group_of(request.query_params)
        stats, _ = await self._known_queue(name)
        address = self._address

        def read(conn: Connection) -> tuple[datetime, list[reads.ErrorGroup], list[Job]]:
            now = reads.clock(conn, address)
            groups = reads.error_groups(conn, address, name, GROUPS_SHOWN)
            if group is None:
                jobs = core.jobs("dead", PAGE_SIZE + 1, before)(conn)
            else:
                jobs = reads.dead_page(conn, address, name, group, before, PAGE_SIZE + 1)
            return now, groups, jobs

        now, groups, jobs = await self.runner.read(read)
        return self._render_text(
            request,
            "dead.html",
            title=f"{name}: dead letters",
            name=name,
            now=now,
            stats=stats,
            groups=groups,
            grouped=sum(g.n for g in groups),
            window=reads.GROUP_WINDOW,
            group_text=reads.GROUP_TEXT,
            group=group,
            jobs=jobs[:PAGE_SIZE],
            next_before=jobs[PAGE_SIZE - 1].id if len(jobs) > PAGE_SIZE else None,
            before=before,
            bulk=DEFAULT_BULK,
            max_bulk=MAX_REQUEUE,
        )

    @page
    async def job(self, request: Request) -> Response:
        name = queue_name(request)
        core = self.runner.queue_core(name)
        job_id = request.path_params["id"]
        if not 1 <= job_id <= reads.MAX_ID:
            raise Refused(404, "no such job")
        get = core.get_job(job_id)
        address = self._address

        def read(conn: Connection) -> tuple[datetime, Job | None]:
            return reads.clock(conn, address), get(conn)

        now, job = await self.runner.read(read)
        if job is None:
            raise Refused(404, f"no job {job_id} in queue {name!r} (acked, purged, or never there)")
        return self._render_text(
            request,
            "job.html",
            title=f"{name}: job {job_id}",
            name=name,
            now=now,
            job=job,
            payload=payload_view(job.payload),
            result=None if job.result is None else payload_view(job.result),
        )

    @page
    async def workers(self, request: Request) -> Response:
        address = self._address

        registered = worker_calls.listing(address.schema)

        def read(conn: Connection) -> tuple[datetime, list[WorkerInfo], list[Any], list[Any]]:
            now = reads.clock(conn, address)
            live = registered(conn)[:WORKERS_SHOWN]
            summary = reads.worker_loads(conn, address, WORKERS_SHOWN)
            jobs = reads.in_flight(conn, address, IN_FLIGHT_SHOWN)
            return now, live, summary, jobs

        now, live, summary, jobs = await self.runner.read(read)
        return self._render_text(
            request,
            "workers.html",
            title="Workers",
            now=now,
            registered=live,
            summary=summary,
            jobs=jobs,
            summary_limit=WORKERS_SHOWN,
            jobs_limit=IN_FLIGHT_SHOWN,
        )

    @page
    async def workflow(self, request: Request) -> Response:
        """G3: a workflow's counts and its steps (state, the ids each comes after)."""
        run_id = request.path_params["id"]
        if not 1 <= run_id <= reads.MAX_ID:
            raise Refused(404, "no such workflow")
        schema = self._address.schema
        status_of, steps_of = (
            workflow_calls.status(schema, run_id),
            workflow_calls.steps(schema, run_id),
        )

        address = self._address

        def read(conn: Connection) -> tuple[datetime, Any, list[Any]]:
            status = status_of(conn)
            steps = [] if status is None else steps_of(conn)[:WORKFLOW_STEPS_SHOWN]
            return reads.clock(conn, address), status, steps

        now, status, steps = await self.runner.read(read)
        if status is None:
            raise Refused(404, f"no workflow {run_id} (never there, or swept once finished)")
        return self._render_text(
            request,
            "workflow.html",
            title=f"Workflow {run_id}",
            now=now,
            status=status,
            steps=steps,
            limit=WORKFLOW_STEPS_SHOWN,
        )
