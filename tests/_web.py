"""Helpers of the dashboard's tests (W1-W5): an app over either face, a client that posts
like the dashboard's own pages do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import URL, Engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from starlette.testclient import TestClient

from alkstore_sa import AsyncStore, Store
from alkstore_sa.web import create_app

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
# A login-free dashboard answers only requests addressed to a loopback host (issue 24).
BASE_URL = "http://127.0.0.1"


@contextmanager
def web_client(kind: str, engine: Engine, database_url: URL, **app_kw: Any) -> Iterator[TestClient]:
    """A TestClient on ``create_app`` over a sync ``Store`` or an ``AsyncStore``."""
    if kind == "sync":
        with (
            Store(engine) as store,
            TestClient(create_app(store, **app_kw), base_url=BASE_URL) as client,
        ):
            yield client
        return
    # NullPool: the async engine's connections never outlive the client's event loop.
    async_engine = create_async_engine(database_url, poolclass=NullPool)
    store = AsyncStore(async_engine)
    with TestClient(create_app(store, **app_kw), base_url=BASE_URL) as client:
        yield client


def token(client: TestClient, path: str = "/") -> str:
    """The CSRF token of a page's forms (and the cookie that goes with it, now in the client)."""
    page = client.get(path)
    found = CSRF_RE.search(page.text)
    if found is not None:
        return found.group(1)
    cookie = client.cookies.get("alkstore_csrf")
    assert cookie, "no CSRF token on the page nor in a cookie"
    return cookie


def post(client: TestClient, path: str, data: Any = None, **kw: Any) -> Any:
    """POST as the dashboard's own page does: same origin, the form's token."""
    fields: list[tuple[str, Any]] = (
        list((data or {}).items()) if isinstance(data, dict) else list(data or [])
    )
    fields.append(("csrf", token(client)))
    headers = {
        "Origin": str(client.base_url).rstrip("/"),
        "Sec-Fetch-Site": "same-origin",
        **kw.pop("headers", {}),
    }
    return client.post(
        path, data=dict(_multi(fields)), headers=headers, follow_redirects=False, **kw
    )


def _multi(fields: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in fields:
        if k in out:
            prev = out[k]
            out[k] = [*prev, v] if isinstance(prev, list) else [prev, v]
        else:
            out[k] = v
    return out


def within(seconds: float, check: Any) -> bool:
    """``check()`` turned true within ``seconds`` (polled every 50 ms)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
