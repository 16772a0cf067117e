"""W3: cross-site POSTs refused (403), read-only mode hides and refuses every action (403),
``auth`` on every request (401), HTTP basic from the environment, the 5 s statement timeout,
bounded lists."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Engine, event
from starlette.requests import Request
from starlette.testclient import TestClient

from alkstore_sa import Store
from alkstore_sa.web import BasicAuth, basic_auth_from_env

from .._web import post, token, web_client

ACTIONS = ("pause", "resume", "requeue", "purge", "jobs/1/cancel")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(kind: str, engine: Engine, database_url: URL) -> Iterator[TestClient]:
    with web_client(kind, engine, database_url) as c:
        yield c


def test_w3_post_without_the_token_is_refused(client: TestClient, store: Store) -> None:
    token(client)  # the cookie is there; the field is not
    for action in ACTIONS:
        r = client.post(f"/queues/q/{action}", data={"all": "1"}, follow_redirects=False)
        assert r.status_code == 403, action
    assert store.queue("q").stats().paused is False


def test_w3_post_with_a_wrong_token_is_refused(client: TestClient, store: Store) -> None:
    token(client)
    r = client.post("/queues/q/pause", data={"csrf": "A" * 43}, follow_redirects=False)
    assert r.status_code == 403
    client.cookies.clear()  # a token but no cookie: another site's form
    r = client.post("/queues/q/pause", data={"csrf": "A" * 43}, follow_redirects=False)
    assert r.status_code == 403
    assert store.queue("q").stats().paused is False


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_w3_cross_site_post_is_refused_even_with_the_token(
    client: TestClient, store: Store, headers: dict[str, str]
) -> None:
    r = post(client, "/queues/q/pause", headers=headers)
    assert r.status_code == 403 and "cross-site" in r.text
    assert store.queue("q").stats().paused is False


def test_w3_same_origin_post_with_the_token_passes(client: TestClient, store: Store) -> None:
    assert post(client, "/queues/q/pause").status_code == 303
    assert store.queue("q").stats().paused is True


def test_w3_csrf_cookie_is_strict_and_http_only(client: TestClient) -> None:
    r = client.get("/")
    cookie = r.headers["set-cookie"].lower()
    assert "alkstore_csrf=" in cookie and "samesite=strict" in cookie and "httponly" in cookie
    assert "set-cookie" not in client.get("/").headers  # kept, not renewed


def test_w3_read_only_hides_and_refuses_every_action(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    q = store.queue("ro")
    job = q.enqueue(b"x")
    h = q.claim_one("w")
    assert h is not None and h.fail("boom")
    live = q.enqueue(b"y")
    with web_client(kind, engine, database_url, read_only=True) as c:
        for path in (
            "/",
            "/queues/ro",
            "/queues/ro/dead",
            f"/queues/ro/jobs/{job}",
            f"/queues/ro/jobs/{live}",
            "/workers",
        ):
            page = c.get(path)
            assert page.status_code == 200
            assert "data-action" not in page.text and "<form" not in page.text, path
        assert "read-only" in c.get("/").text
        for action in ("pause", "resume", "requeue", "purge", f"jobs/{live}/cancel"):
            r = post(c, f"/queues/ro/{action}", {"id": str(job)})
            assert r.status_code == 403, action
    assert q.stats().paused is False and q.get_job(job).status == "dead"  # type: ignore[union-attr]
    assert q.get_job(live) is not None


def test_w3_auth_runs_on_every_request(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    seen: list[str] = []
    store.queue("a").enqueue(b"x")  # a queue with a row: /queues/a is a page (V2)

    def auth(request: Request) -> bool:
        seen.append(request.url.path)
        return request.headers.get("x-let-me-in") == "yes"

    with web_client(kind, engine, database_url, auth=auth) as c:
        for path in ("/", "/workers", "/queues/a", "/static/alkstore.css"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"x-let-me-in": "yes"}).status_code == 200
        assert c.post("/queues/a/pause").status_code == 401
    assert "/static/alkstore.css" in seen


def test_w3_async_auth_is_awaited(kind: str, engine: Engine, database_url: URL) -> None:
    async def auth(request: Request) -> bool:
        return request.query_params.get("k") == "1"

    with web_client(kind, engine, database_url, auth=auth) as c:
        assert c.get("/").status_code == 401
        assert c.get("/?k=1").status_code == 200


def _basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def test_w3_http_basic_from_the_environment(kind: str, engine: Engine, database_url: URL) -> None:
    auth = basic_auth_from_env({"ALKSTORE_WEB_USER": "ops", "ALKSTORE_WEB_PASSWORD": "s3cret"})
    assert isinstance(auth, BasicAuth)
    with web_client(kind, engine, database_url, auth=auth) as c:
        r = c.get("/")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
        assert c.get("/", headers=_basic("ops", "wrong")).status_code == 401
        assert c.get("/", headers=_basic("nobody", "s3cret")).status_code == 401
        assert c.get("/", headers={"Authorization": "Basic !!!"}).status_code == 401
        assert c.get("/", headers=_basic("ops", "s3cret")).status_code == 200


def test_w3_basic_auth_env_needs_both_or_neither() -> None:
    assert basic_auth_from_env({}) is None
    with pytest.raises(ValueError, match="ALKSTORE_WEB_PASSWORD"):
        basic_auth_from_env({"ALKSTORE_WEB_USER": "ops"})
    with pytest.raises(ValueError, match="ALKSTORE_WEB_USER"):
        basic_auth_from_env({"ALKSTORE_WEB_PASSWORD": "x"})


def test_w3_every_dashboard_query_runs_under_a_5s_statement_timeout(
    engine: Engine, database_url: URL, store: Store
) -> None:
    """Each page's and action's transaction sets statement_timeout = 5 s locally first."""
    q = store.queue("t")
    dead = q.enqueue(b"x")
    h = q.claim_one("w")
    assert h is not None and h.fail("e")
    seen: list[Any] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        with cursor.connection.cursor() as own:  # not the statement's cursor: its rows stay
            own.execute("SHOW statement_timeout")
            seen.append((own.fetchone()[0], statement.split()[0]))

    event.listen(engine, "after_cursor_execute", record)
    try:
        with web_client("sync", engine, database_url) as c:
            for path in ("/", "/queues/t", "/queues/t/dead", f"/queues/t/jobs/{dead}", "/workers"):
                assert c.get(path).status_code == 200
            assert post(c, "/queues/t/requeue", {"id": str(dead)}).status_code == 303
            assert post(c, "/queues/t/pause").status_code == 303
    finally:
        event.remove(engine, "after_cursor_execute", record)
    assert len(seen) > 10
    assert {timeout for timeout, _ in seen} == {"5s"}, seen
    # ... and only inside the dashboard's transactions: the pool's connections come back clean.
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"


def test_w3_every_list_is_bounded(client: TestClient, store: Store) -> None:
    q = store.queue("big")
    q.enqueue_many([b"x"] * 120)
    page = client.get("/queues/big/jobs")
    assert page.text.count("<tr data-job-id=") == 50
    q.claim_batch("w", 120)
    workers = client.get("/workers")
    assert workers.text.count("<tr>") <= 100 + 10  # the in-flight list is cut at 100


def test_w3_redirect_after_a_post_never_leaves_the_dashboard(client: TestClient) -> None:
    for evil in ("//evil.example/x", "/\\evil.example", "https://evil.example/", "/a\r\nX: y"):
        r = post(client, "/queues/q/resume", {"next": evil})
        assert r.status_code == 303 and r.headers["location"].startswith("/?done="), evil
    r = post(client, "/queues/q/resume", {"next": "/queues/q/dead?before=5"})
    assert r.headers["location"].startswith("/queues/q/dead?before=5&done=")
