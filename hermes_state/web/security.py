"""What every response of the viewer carries, and who may get one.

Two ASGI middlewares around the app:

* :class:`Guard` answers 405 to any method but GET and HEAD (the viewer only
  reads) and adds the headers that keep stored content inert: a
  Content-Security-Policy that allows scripts, styles and connections from
  the viewer itself only (no inline script, so text that looks like a script
  stays text; images only from the page and ``data:`` URLs, so nothing is
  fetched from another host), ``X-Content-Type-Options: nosniff``, no
  framing, no referrer, no caching.
* :class:`TokenGate` (when a token is set) lets a request through with the
  token in the ``token`` query parameter, which it then moves into a cookie
  by redirecting to the same URL without it, or in that cookie. No token:
  401; a wrong one: 403. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = ["Guard", "TokenGate", "CONTENT_SECURITY_POLICY", "SECURITY_HEADERS"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
READ_METHODS = frozenset({"GET", "HEAD"})


async def _plain(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class Guard:
    """405 for writes; the security headers on every response (errors included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in SECURITY_HEADERS if name not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        if scope["method"] not in READ_METHODS:
            await _plain(send_with_headers, 405, "method not allowed: this viewer only reads\n", [(b"allow", b"GET, HEAD")])
            return
        await self.app(scope, receive, send_with_headers)


def _cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header carries no token
                return None
            if name in jar:
                return jar[name].value
    return None


class TokenGate:
    """Requests need the access token: in ``?token=`` (moved into a cookie) or in that cookie."""

    def __init__(self, app: ASGIApp, token: str, cookie_name: str) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie_name = cookie_name

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [value for key, value in query if key == "token"]
        if offered:
            if not self._matches(offered[-1]):
                await _plain(send, 403, "forbidden: wrong access token\n")
                return
            rest = urlencode([(key, value) for key, value in query if key != "token"])
            # The path as the client sent it (still percent-encoded), so odd session ids survive the round trip.
            location = scope.get("raw_path") or scope["path"].encode("utf-8")
            if rest:
                location += b"?" + rest.encode("ascii")
            cookie = f"{self.cookie_name}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
            await _plain(send, 303, "see other\n", [(b"location", location), (b"set-cookie", cookie.encode())])
            return
        kept = _cookie(scope, self.cookie_name)
        if kept is None:
            await _plain(send, 401, "unauthorized: open the URL with ?token=... that `hermes-state serve` printed\n",
                         [(b"www-authenticate", b'Bearer realm="hermes-state"')])
            return
        if not self._matches(kept):
            await _plain(send, 403, "forbidden: wrong access token\n")
            return
        await self.app(scope, receive, send)
