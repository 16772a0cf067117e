"""V2 and the hardened headers (issue 24) in a real headless Chromium.

The pages run under their Content-Security-Policy (``default-src 'self'``): the
browser reports any inline script or style it blocks, and none may be reported.
A dead-letter page with 1 MB errors opens cut; its error group's link, clicked,
lists the group; the live refresh keeps that filter and shows a new member.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from alkstore_sa import Store
from alkstore_sa.web import create_app

from .._browser import browser_page, require_browser, serve

pytestmark = pytest.mark.browser

MB = 1024 * 1024


@pytest.fixture
def site(engine: Engine) -> Iterator[tuple[str, Store]]:
    require_browser()
    with Store(engine) as store, serve(create_app(store)) as url:
        yield url, store


def _dead(store: Store, engine: Engine, queue: str, error: str, n: int = 1) -> list[int]:
    q = store.queue(queue)
    ids = q.enqueue_many([b"x"] * n)
    for _ in ids:
        h = q.claim_one("w")
        assert h is not None and h.fail("placeholder")
    with engine.begin() as conn:  # the text as a forged row or another producer may hold it
        conn.execute(
            text("UPDATE alkstore.dead_jobs SET last_error = :e WHERE id = ANY(:ids)"),
            {"e": error, "ids": ids},
        )
    return ids


def test_v2_pages_run_under_the_csp_and_a_1mb_error_group_works_in_chromium(
    site: tuple[str, Store], engine: Engine
) -> None:
    url, store = site
    big = "upstream timeout (request 1234) " + "y" * MB
    ids = _dead(store, engine, "big", big, 3)
    _dead(store, engine, "big", "other error", 2)
    blocked: list[str] = []
    with browser_page() as page:
        page.on(
            "console",
            lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None,
        )
        for path in (
            "/",
            "/workers",
            "/queues/big",
            "/queues/big/dead",
            f"/queues/big/jobs/{ids[0]}",
        ):
            response = page.goto(url + path)
            assert response is not None and response.status == 200, path
            assert response.headers["content-security-policy"].startswith("default-src 'self'")
            assert response.headers["x-frame-options"] == "DENY"
        page.goto(url + "/queues/big/dead")
        page.wait_for_selector("table.groups")
        assert "1,048,608 bytes" in page.inner_text("table.groups")
        page.click("table.groups a:has-text('upstream timeout (request N)')")
        page.wait_for_url("**/queues/big/dead?error=*")
        rows = page.locator("table.jobs tbody tr[data-job-id]")
        assert rows.count() == 3
        assert "1,048,608 characters" in page.inner_text("table.jobs")
        # A new member of the group shows through the live refresh, the filter kept.
        [new] = _dead(store, engine, "big", "upstream timeout (request 99) " + "y" * MB)
        page.wait_for_selector(f"tr[data-job-id='{new}']", timeout=3000)
        assert rows.count() == 4
        assert page.locator("tr[data-job-id]").count() == 4  # the other group not listed
    assert not blocked, blocked


def test_v2_the_dashboard_cannot_be_framed(site: tuple[str, Store]) -> None:
    url, store = site
    store.queue("framed").enqueue(b"x")
    with browser_page() as page:
        # Another origin (a data: page) frames the dashboard: the browser refuses it.
        page.set_content(f'<iframe id="f" src="{url}/queues/framed"></iframe>')
        page.wait_for_timeout(1500)
        frame = page.frame_locator("#f")
        assert frame.locator(".cards").count() == 0
