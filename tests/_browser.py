"""Real headless Chromium for the dashboard's browser tests (W1, W2, W4, W5).

Playwright drives the system's Chromium (Debian's ``chromium`` package, or
``ALKSTORE_CHROMIUM``); Playwright's own browser download is never used.
The dashboard runs under uvicorn in a thread, on a free loopback port.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def chromium_path() -> str | None:
    for candidate in (
        os.environ.get("ALKSTORE_CHROMIUM"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def require_browser() -> tuple[Any, str]:
    """Playwright's sync API and a Chromium to drive, or skip saying which is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need the playwright package (pip install playwright)")
    path = chromium_path()
    if path is None:
        pytest.skip(
            "browser tests need Chromium: apt-get install chromium (or set ALKSTORE_CHROMIUM)"
        )
    return sync_playwright, path


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1 and a free port, in a thread; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the dashboard's server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def browser_page() -> Iterator[Any]:
    """A fresh page of a headless Chromium at 1280x900; dialogs are accepted."""
    sync_playwright, path = require_browser()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.on("dialog", lambda dialog: dialog.accept())
            yield page
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> None:
    """Save a full-page screenshot under ``$ALKSTORE_SCREENSHOTS`` (docs/images) when set."""
    where = os.environ.get("ALKSTORE_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)
