"""The dashboard's actions (W1, W3, F1): pause, resume, limits, requeue, purge, cancel.

Each is a POST of a plain form, checked by ``_http.action`` (read-only,
cross-site, bad input), and runs public queue methods only, in the
dashboard's timed transaction (``session=``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection
from starlette.datastructures import FormData
from starlette.requests import Request

from .._calls.core import MAX_REQUEUE
from .._db import dashboard as reads
from .._db.address import StoreAddress
from .._values.limits import Limits, Rate
from ._http import Refused, action, group_of, int_param, queue_name
from ._pages import DEFAULT_BULK
from ._render import DashboardBase

__all__ = ["Actions"]


class Actions(DashboardBase):
    """The POST handlers."""

    @action
    async def pause(self, request: Request, form: FormData) -> str:
        name = queue_name(request)
        changed = await self.runner.act(name, lambda q, s: q.pause(session=s))
        return f"paused {name}" if changed else f"{name} was already paused"

    @action
    async def resume(self, request: Request, form: FormData) -> str:
        name = queue_name(request)
        changed = await self.runner.act(name, lambda q, s: q.resume(session=s))
        return f"resumed {name}" if changed else f"{name} was not paused"

    @action
    async def set_limits(self, request: Request, form: FormData) -> str:
        """F1: replace the queue's limits with the form's (every field empty: none)."""
        name = queue_name(request)
        wanted = _limits_of(form)
        await self.runner.act(name, lambda q, s: q.set_limits(wanted, session=s))
        return f"limits of {name} removed" if wanted is None else f"limits of {name} set"

    @action
    async def requeue(self, request: Request, form: FormData) -> str:
        moved = await self._selected(
            request,
            form,
            lambda q, ids, s: q.requeue_dead(ids, limit=max(len(ids), 1), session=s),
        )
        return f"requeued {moved} job(s)"

    @action
    async def purge(self, request: Request, form: FormData) -> str:
        gone = await self._selected(request, form, lambda q, ids, s: q.purge_dead(ids, session=s))
        return f"purged {gone} dead job(s)"

    async def _selected(
        self, request: Request, form: FormData, move: Callable[[Any, list[int], Any], Any]
    ) -> Any:
        """``move(queue, ids, session)`` on the form's selection: its ids, or the oldest
        ``limit`` dead ids (of one error group when the form names one)."""
        name = queue_name(request)
        ids, limit, group = _selection(form)
        address = StoreAddress(self.runner.schema)
        which = group or reads.Group(None, any_error=True)

        def run(q: Any, session: Any) -> Any:
            if ids is not None:
                return move(q, ids, session)
            return _then(
                _matching_ids(session, address, name, which, limit),
                lambda found: move(q, found, session),
            )

        return await self.runner.act(name, run)

    @action
    async def cancel(self, request: Request, form: FormData) -> str:
        name = queue_name(request)
        job_id = int_param(request.path_params["id"], "job id")
        done = await self.runner.act(name, lambda q, s: q.cancel(job_id, session=s))
        return f"cancelled job {job_id}" if done else f"job {job_id} was not pending or processing"


def _selection(form: FormData) -> tuple[list[int] | None, int, reads.Group | None]:
    """W1's fields: ``id`` repeated, or ``all=1`` with ``limit`` (and ``error``/``type``:
    one error group)."""
    raw_ids = form.getlist("id")
    everything = form.get("all") == "1"
    if raw_ids and everything:
        raise Refused(400, "give ids or all=1, not both")
    if not raw_ids and not everything:
        raise Refused(400, "select at least one job (or all=1)")
    if len(raw_ids) > MAX_REQUEUE:
        raise Refused(400, f"at most {MAX_REQUEUE} ids at once")
    limit_raw = form.get("limit") or str(DEFAULT_BULK)
    limit = int_param(limit_raw, "limit", MAX_REQUEUE)
    ids = [int_param(i, "id") for i in raw_ids] if raw_ids else None
    return ids, limit, group_of(form)


def _matching_ids(
    session: Any, address: StoreAddress, name: str, group: reads.Group, limit: int
) -> Any:
    """The oldest ``limit`` dead ids of the queue in ``group``, read in the action's own
    transaction, so the ids and the move agree."""

    def read(conn: Connection) -> list[int]:
        return reads.dead_ids(conn, address, name, group, limit)

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


_MAX_LIMIT = 2_147_483_647  # the settings row's integer columns


def _limits_of(form: FormData) -> Limits | None:
    """The limits form's fields as ``Limits`` (None when all are empty): a count left
    empty is no limit, a rate needs its count and its seconds.  Refused (400) on
    bad input; ``Limits`` and ``Rate`` check the rest (their errors are 400s)."""

    def whole(key: str) -> int | None:
        raw = str(form.get(key) or "").strip()
        return None if not raw else int_param(raw, key, _MAX_LIMIT)

    def rate(prefix: str) -> Rate | None:
        count, per = whole(f"{prefix}rate_count"), str(form.get(f"{prefix}rate_per") or "").strip()
        if count is None and not per:
            return None
        if count is None or not per:
            raise Refused(400, f"{prefix}rate needs a count and seconds, or neither")
        try:
            seconds = float(per)
        except ValueError:
            raise Refused(400, f"{prefix}rate_per must be seconds, got {per[:40]!r}") from None
        return Rate(count, seconds)

    found = Limits(
        concurrency=whole("concurrency"),
        group_concurrency=whole("group_concurrency"),
        rate=rate(""),
        group_rate=rate("group_"),
    )
    return None if found.empty else found
