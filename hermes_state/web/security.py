"""What every response of the viewer carries, and who may get one.

Two ASGI middlewares around the app:

* :class:`Guard` answers 400 to a request whose ``Host`` is not one of the
  viewer's own names (loopback names and the bound address): a page on
  another site that re-points its DNS name at 127.0.0.1 (DNS rebinding) gets
  no data. It answers 405 to any method but GET and HEAD (the viewer only
  reads) and adds the headers that keep stored content inert: a
  Content-Security-Policy that allows scripts, styles and connections from
  the viewer itself only (no inline script, so text that looks like a script
  stays text; images only from the page and ``data:`` URLs, so nothing is
  fetched from another host), ``X-Content-Type-Options: nosniff``, no
  framing, no referrer, no caching.
* :class:`TokenGate` (when a token is set) lets a request through with the
  token in an ``Authorization: Bearer`` header, in that cookie, or in the
  ``token`` query parameter. On a page a browser opens, the query token is
  moved into a cookie by redirecting to the same path without it (always a
  path on this server, never ``//other.host``); ``/api/*`` answers at once,
  so scripts need no cookie jar. No token: 401; a wrong one: 403. Tokens are
  compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

__all__ = ["Guard", "HostRule", "TokenGate", "CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "same_origin_path"]

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


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, port and IPv6 brackets removed, lower case, no trailing dot."""
    header = header.strip()
    if header.startswith("["):
        name = header[1:header.find("]")] if "]" in header else header[1:]
    elif header.count(":") == 1:
        name = header.split(":", 1)[0]
    else:
        name = header
    return name.lower().rstrip(".")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


class HostRule:
    """Which ``Host`` headers name this viewer: loopback names and addresses, and the address it is bound to.

    Bound to a wildcard (``0.0.0.0``, ``::``), any IP literal is accepted too
    (a rebinding attack needs a DNS name the attacker controls, and an
    address typed as digits cannot be re-pointed), and so is this machine's
    host name.
    """

    def __init__(self, bound: str = "127.0.0.1", extra: tuple[str, ...] = ()) -> None:
        self.names = {_host_name(bound), *(_host_name(name) for name in extra)}
        address = _ip(_host_name(bound))
        self.any_address = address is not None and address.is_unspecified
        if self.any_address:
            self.names.add(_host_name(socket.gethostname()))

    def allows(self, header: str | None) -> bool:
        """True for a Host this viewer answers to (a request without one comes from no browser)."""
        if header is None:
            return True
        name = _host_name(header)
        if name == "localhost" or name.endswith(".localhost") or name in self.names:
            return True  # *.localhost never leaves the machine (RFC 6761), browsers resolve it themselves
        address = _ip(name)
        return address is not None and (address.is_loopback or self.any_address)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == wanted:
            return value.decode("latin-1")
    return None


class Guard:
    """400 for a foreign Host, 405 for writes; the security headers on every response (errors included)."""

    def __init__(self, app: ASGIApp, hosts: HostRule | None = None) -> None:
        self.app = app
        self.hosts = hosts or HostRule()

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

        if not self.hosts.allows(_header(scope, b"host")):
            await _plain(send_with_headers, 400, "bad request: this Host is not an address of this viewer\n")
            return
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


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, credentials = value.strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


# Bytes a path keeps as they are; anything else (backslashes, controls, non-ASCII) is percent-encoded.
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def same_origin_path(raw_path: bytes) -> bytes:
    """``raw_path`` as a Location that stays on this server: one leading slash, never ``//host`` or ``/\\host``."""
    text = quote(raw_path.decode("latin-1"), safe=_PATH_SAFE, encoding="latin-1")
    return ("/" + text.lstrip("/")).encode("ascii")


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
        bearer = _bearer(scope)
        if bearer is not None:
            if not self._matches(bearer):
                await _plain(send, 403, "forbidden: wrong access token\n")
                return
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [value for key, value in query if key == "token"]
        if offered:
            if not self._matches(offered[-1]):
                await _plain(send, 403, "forbidden: wrong access token\n")
                return
            if scope["path"].startswith("/api/"):
                await self.app(scope, receive, send)  # a script's request: answered, no cookie round trip
                return
            rest = urlencode([(key, value) for key, value in query if key != "token"])
            # The path as the client sent it (still percent-encoded), so odd session ids survive the round trip.
            location = same_origin_path(scope.get("raw_path") or scope["path"].encode("utf-8"))
            if rest:
                location += b"?" + rest.encode("ascii")
            cookie = f"{self.cookie_name}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
            await _plain(send, 303, "see other\n", [(b"location", location), (b"set-cookie", cookie.encode())])
            return
        kept = _cookie(scope, self.cookie_name)
        if kept is None:
            await _plain(send, 401, "unauthorized: open the URL with ?token=... that `hermes-state serve` printed, "
                         "or send the token as `Authorization: Bearer ...`\n",
                         [(b"www-authenticate", b'Bearer realm="hermes-state"')])
            return
        if not self._matches(kept):
            await _plain(send, 403, "forbidden: wrong access token\n")
            return
        await self.app(scope, receive, send)
