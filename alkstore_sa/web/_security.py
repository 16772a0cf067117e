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
``ALKSTORE_WEB_PASSWORD``).  With no ``auth``, only requests addressed to a
loopback host (``Host: localhost``, ``127.x.x.x``, ``[::1]``) are answered
(``LoopbackOnly``): a DNS-rebinding page, whose requests carry its own host
name, cannot read or drive a login-free dashboard.

Every response, errors and static files included, carries ``HEADERS``: a
CSP that allows only the dashboard's own files and no framing (the pages
have no inline script or style), ``X-Frame-Options: DENY`` for older
browsers, ``nosniff`` and a same-origin referrer policy.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import inspect
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._values.text import printable

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "HEADERS",
    "Auth",
    "AuthMiddleware",
    "BasicAuth",
    "LoopbackOnly",
    "SecurityHeaders",
    "is_loopback_host",
    "basic_auth_from_env",
    "cross_site_reason",
    "csrf_token",
]

Auth = Callable[[Request], bool | Awaitable[bool]]

CSRF_COOKIE = "alkstore_csrf"
CSRF_FIELD = "csrf"
USER_VAR = "ALKSTORE_WEB_USER"
PASSWORD_VAR = "ALKSTORE_WEB_PASSWORD"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


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


class _HttpOnly:
    """An ASGI middleware that looks at HTTP requests only (lifespan and others pass)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class SecurityHeaders(_HttpOnly):
    """Adds ``HEADERS`` to every HTTP response of ``app`` (set last: they win)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def is_loopback_host(host: str) -> bool:
    """``localhost``, a 127.0.0.0/8 address or ``::1`` (bracketed in a Host header)."""
    name = host.strip().rstrip(".").lower()
    if name == "localhost":
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header, without its port (``[::1]:8000`` -> ``[::1]``)."""
    if header.startswith("["):
        end = header.find("]")
        return header if end < 0 else header[: end + 1]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LoopbackOnly(_HttpOnly):
    """With no ``auth``: 403 for a request whose Host is not a loopback name (see above)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = Headers(scope=scope).get("host", "")
        if is_loopback_host(_host_name(host)):
            await self.app(scope, receive, send)
            return
        shown = printable(host[:100]) or "(none)"
        message = (
            f"refused: this dashboard has no login, so it answers only requests addressed to "
            f"localhost, 127.0.0.1 or [::1]; this one was addressed to {shown}. "
            "Give create_app an auth= (or set ALKSTORE_WEB_USER and ALKSTORE_WEB_PASSWORD "
            "for alkstore web) to serve it under another name; see docs/web.md."
        )
        await PlainTextResponse(message, status_code=403)(scope, receive, send)
