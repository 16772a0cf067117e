"""W3: who may look (``auth``), and that every POST comes from the dashboard's own pages.

Cross-site requests are refused twice over:

- a double-submit token: a random value in a ``SameSite=Strict``,
  ``HttpOnly`` cookie, repeated in a hidden field of every form; a POST
  whose field does not match its cookie is refused (403).  Another site can
  make a browser send the cookie (not even that, with ``Strict``) but cannot
  read it to fill the field.
- the browser's own word: a POST whose ``Sec-Fetch-Site`` is neither
  ``same-origin`` nor ``none``, or whose ``Origin`` names another host, is
  refused (403) before the token is looked at.

``auth(request) -> bool`` (or an awaitable bool) runs on every request,
static files included; ``False`` gives 401.  ``BasicAuth`` is the ready one
(``basic_auth_from_env()`` reads ``ALKSTORE_WEB_USER`` /
``ALKSTORE_WEB_PASSWORD``).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import inspect
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "Auth",
    "AuthMiddleware",
    "BasicAuth",
    "basic_auth_from_env",
    "cross_site_reason",
    "csrf_token",
]

Auth = Callable[[Request], bool | Awaitable[bool]]

CSRF_COOKIE = "alkstore_csrf"
CSRF_FIELD = "csrf"
USER_VAR = "ALKSTORE_WEB_USER"
PASSWORD_VAR = "ALKSTORE_WEB_PASSWORD"


class BasicAuth:
    """HTTP basic authentication against one user name and password."""

    realm = "alkstore"

    def __init__(self, user: str, password: str) -> None:
        if not user or not password:
            raise ValueError("basic auth needs a non-empty user name and password")
        self._user = user.encode()
        self._password = password.encode()

    def __call__(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        # Both compared, always, in constant time: no early answer to time.
        same_user = hmac.compare_digest(user, self._user)
        same_password = hmac.compare_digest(password, self._password)
        return bool(sep) and same_user and same_password


def basic_auth_from_env(environ: Mapping[str, str] | None = None) -> BasicAuth | None:
    """``BasicAuth`` from ``ALKSTORE_WEB_USER``/``ALKSTORE_WEB_PASSWORD``; None when neither is set.

    One without the other is a ``ValueError`` (a half-configured login must
    not silently serve an open dashboard).
    """
    env = os.environ if environ is None else environ
    user, password = env.get(USER_VAR, ""), env.get(PASSWORD_VAR, "")
    if not user and not password:
        return None
    if not user or not password:
        missing = USER_VAR if not user else PASSWORD_VAR
        raise ValueError(
            f"{missing} is not set (basic auth needs both {USER_VAR} and {PASSWORD_VAR})"
        )
    return BasicAuth(user, password)


class AuthMiddleware:
    """Runs ``auth`` on every HTTP request; 401 when it says no."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed = self.auth(Request(scope))
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if allowed is True:
            await self.app(scope, receive, send)
            return
        headers = {}
        realm = getattr(self.auth, "realm", None)
        if isinstance(realm, str):
            headers["WWW-Authenticate"] = f'Basic realm="{realm}", charset="UTF-8"'
        response = PlainTextResponse("authentication required", status_code=401, headers=headers)
        await response(scope, receive, send)


def csrf_token(request: Request) -> str:
    """The request's token: its cookie's when well-formed, else a new one (set by the response)."""
    token = getattr(request.state, "csrf", None)
    if token is None:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        token = cookie if _well_formed(cookie) else secrets.token_urlsafe(32)
        request.state.csrf = token
        request.state.csrf_new = token != cookie
    return str(token)


def _well_formed(token: str) -> bool:
    return 32 <= len(token) <= 64 and all(c.isalnum() or c in "-_" for c in token)


def cross_site_reason(request: Request, form_token: object) -> str | None:
    """Why this POST is refused as cross-site, or None when it comes from our own page."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
            return "cross-site request refused (Origin does not match Host)"
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not (
        isinstance(form_token, str)
        and _well_formed(cookie)
        and hmac.compare_digest(form_token.encode(), cookie.encode())
    ):
        return "cross-site request refused (missing or wrong CSRF token; reload the page)"
    return None
