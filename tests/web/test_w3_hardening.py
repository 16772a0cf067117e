"""W3, hardened (issue 24): a login-free dashboard answers only loopback Host headers,
every response carries the anti-framing and anti-sniffing headers, long texts are
cut, control and bidi characters are shown as escapes.

Hostile rows are written with SQL, as a producer in another language (or a
forged row) would: the public API cuts what it is given, a row need not.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import URL, Engine, text
from starlette.testclient import TestClient

from alkstore_sa import Store
from alkstore_sa.web import create_app
from alkstore_sa.web._security import HEADERS

from .._web import BASE_URL, post, token, web_client

MB = 1024 * 1024


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _dead(store: Store, queue: str, n: int, error: str = "boom") -> list[int]:
    q = store.queue(queue)
    ids = q.enqueue_many([f"job {i}".encode() for i in range(n)])
    for _ in ids:
        h = q.claim_one("w")
        assert h is not None and h.fail(error)
    return ids


def _set_error(engine: Engine, job_id: int, error: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE alkstore.dead_jobs SET last_error = :e WHERE id = :i"),
            {"e": error, "i": job_id},
        )


def _has_headers(response: Any) -> None:
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, (response.status_code, name, response.headers)


def test_w3_no_auth_refuses_a_foreign_host_and_says_why(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    q = store.queue("rebind")
    q.enqueue(b"x")
    with web_client(kind, engine, database_url) as c:
        evil = {"Host": "attacker.example:8000"}
        page = c.get("/", headers=evil)
        assert page.status_code == 403
        assert "localhost" in page.text and "attacker.example:8000" in page.text
        assert "auth=" in page.text
        _has_headers(page)
        # The DNS-rebinding attack of issue 24: read the token, post a pause, as that host.
        csrf = token(c)
        r = c.post(
            "/queues/rebind/pause",
            data={"csrf": csrf},
            headers={**evil, "Origin": "http://attacker.example:8000"},
            follow_redirects=False,
        )
        assert r.status_code == 403 and q.stats().paused is False
        for host in ("localhost", "localhost:8000", "127.0.0.1", "127.0.0.2:9", "[::1]:8000"):
            assert c.get("/", headers={"Host": host}).status_code == 200, host
        for host in ("127.0.0.1.attacker.example", "localhost.attacker.example", "0.0.0.0", ""):
            assert c.get("/", headers={"Host": host}).status_code == 403, host


def test_w3_with_auth_any_host_is_answered(kind: str, engine: Engine, database_url: URL) -> None:
    with web_client(kind, engine, database_url, auth=lambda request: True) as c:
        assert c.get("/", headers={"Host": "dashboard.example"}).status_code == 200


def test_w3_security_headers_on_every_response(
    engine: Engine, database_url: URL, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    [dead] = _dead(store, "hdr", 1)
    with web_client("sync", engine, database_url) as c:
        responses = [
            c.get("/"),
            c.get("/queues/hdr"),
            c.get(f"/queues/hdr/jobs/{dead}"),
            c.get("/static/alkstore.css"),
            c.get("/static/live.js"),
            c.get("/static/nothing.js"),  # 404 of the static files
            c.get("/queues/nosuch"),  # 404 of a page
            c.get("/queues/hdr", params={"status": "bogus"}),  # 400
            c.get("/", headers={"Host": "elsewhere.example"}),  # 403, refused host
            post(c, "/queues/hdr/pause"),  # 303 redirect
            post(c, "/queues/hdr/resume", headers={"X-Alkstore-Live": "1"}),  # 200 text
            c.post("/queues/hdr/pause", data={"csrf": "x"}),  # 403, cross-site
        ]
        statuses = {r.status_code for r in responses}
        assert {200, 303, 400, 403, 404} <= statuses
        for r in responses:
            _has_headers(r)
    with web_client("sync", engine, database_url, read_only=True) as c:
        _has_headers(post(c, "/queues/hdr/pause"))  # 403, read-only
    with web_client("sync", engine, database_url, auth=lambda r: False) as c:
        _has_headers(c.get("/"))  # 401
    # A 500 from an error nobody handles, answered by Starlette's outermost layer.
    from alkstore_sa.web import _pages

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_pages.reads, "clock", broken)
    with Store(engine) as s:
        app = create_app(s, read_only=True)
        with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as c:
            r = c.get("/workers")
            assert r.status_code == 500
            _has_headers(r)


def test_w3_create_app_without_auth_warns_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with Store(engine) as store, caplog.at_level(logging.WARNING, logger="alkstore_sa.web"):
        app = create_app(store)
        with TestClient(app, base_url=BASE_URL) as c:
            for _ in range(3):
                assert c.get("/").status_code == 200
        warned = [r for r in caplog.records if r.name == "alkstore_sa.web"]
        assert len(warned) == 1 and "no auth" in warned[0].getMessage()
        caplog.clear()
        create_app(store, read_only=True)
        create_app(store, auth=lambda r: True)
        assert not [r for r in caplog.records if r.name == "alkstore_sa.web"]


def test_w3_a_1mb_error_renders_cut_and_its_group_link_works(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    ids = _dead(store, "big", 20)
    huge = "gateway said: " + "x" * MB
    for i in ids:
        _set_error(engine, i, huge)
    with web_client(kind, engine, database_url) as c:
        page = c.get("/queues/big/dead")
        assert page.status_code == 200
        # 20 rows of a 1 MB error each, and one group: the page stays small.
        assert len(page.content) < 200_000, len(page.content)
        assert f"{len(huge):,} characters" in page.text
        live = c.get("/queues/big/dead", headers={"X-Alkstore-Live": "1"})
        assert len(live.content) < 200_000
        groups = page.text.split('class="grid groups"')[1].split("</table>")[0]
        link = groups.split('<a href="')[1].split('"')[0].replace("&amp;", "&")
        assert len(link) < 2_000
        one = c.get(link)
        assert one.status_code == 200
        assert all(f'data-job-id="{i}"' in one.text for i in ids)
        # The requeue-all of that group acts on it, by the same bounded key.
        fields = groups.split('data-action="requeue"')[1].split("</form>")[0]
        error = fields.split('name="error" value="')[1].split('"')[0]
        assert len(error) <= 400
        # The job page: cut, with the full text (bounded) on demand.
        job = c.get(f"/queues/big/jobs/{ids[0]}")
        assert f"{len(huge):,} characters" in job.text and len(job.content) < 100_000
        full = c.get(f"/queues/big/jobs/{ids[0]}", params={"full": "1"})
        assert full.status_code == 200 and 64 * 1024 < len(full.content) < 300_000


def test_w3_control_and_bidi_characters_are_shown_escaped(
    kind: str, engine: Engine, database_url: URL, store: Store
) -> None:
    [job] = _dead(store, "esc", 1)
    _set_error(engine, job, "\x1b[2K\x1b[32mOK all good \u202eevil\u202c done\r")
    with engine.begin() as conn:  # a worker id with a bidi override, on a live row
        live = store.queue("esc").enqueue(b"y")
        conn.execute(
            text(
                "UPDATE alkstore.jobs SET status = 'processing', worker_id = :w, "
                "attempts = 1, claim_deadline = now() + interval '1 hour' WHERE id = :i"
            ),
            {"w": "host\u202e1", "i": live},
        )
    with web_client(kind, engine, database_url) as c:
        for path in (
            "/queues/esc/dead",
            f"/queues/esc/jobs/{job}",
            "/workers",
            "/queues/esc",
        ):
            page = c.get(path)
            assert page.status_code == 200, path
            assert "\x1b" not in page.text and "\u202e" not in page.text, path
            assert "\r" not in page.text.replace("\r\n", ""), path
        assert "\\x1b[2K" in c.get(f"/queues/esc/jobs/{job}").text
        assert "\\u202e" in c.get("/workers").text
