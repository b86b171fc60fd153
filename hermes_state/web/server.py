"""``hermes-state serve``: the viewer on uvicorn, on the event loop the store is bound to.

The store is opened read-only and live (a SQLite file is not read as the
command's immutable snapshot: other processes keep writing while the viewer
runs) before the port is bound, so a missing or foreign database is one
error line. Once listening, the URL is printed on stdout as one line.
SIGINT and SIGTERM stop the server gracefully; the store closes last.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn

from ..cli.errors import CliError
from ..cli.target import Target, open_store
from .app import create_app

__all__ = ["serve", "is_loopback", "TOKEN_PATTERN"]

# Tokens travel in a URL and a cookie: unreserved URL characters only.
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~-]{8,256}")
GRACEFUL_SECONDS = 5


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _url(sock: socket.socket, host: str, token: str | None) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


class _Server(uvicorn.Server):
    """uvicorn's server that prints the viewer's URL once it listens."""

    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self.url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            print(self.url, flush=True)


class _Stop:
    """SIGINT/SIGTERM handlers for the whole command: they record the signal and stop the server, if any."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.server: uvicorn.Server | None = None
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.server is not None:
            self.server.should_exit = True

    def __enter__(self) -> _Stop:
        # uvicorn installs its own handlers while it serves and re-raises the signal it got
        # afterwards: these take that one (and any that comes before it starts) quietly.
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @property
    def status(self) -> int:
        return 130 if signal.SIGINT in self.received else 0


async def serve(target: Target, *, host: str, port: int, token: str | None) -> int:
    """Serve the viewer until SIGINT (returns 130) or SIGTERM (returns 0)."""
    if token is not None and not TOKEN_PATTERN.fullmatch(token):
        raise CliError("--token must be 8 to 256 characters from A-Z a-z 0-9 . _ ~ -")
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)  # printed in the URL; anyone without it gets 401/403
    with _Stop() as stop:
        db = open_store(target, read_only=True, snapshot=False)
        try:
            await db.storage_info()  # opens the store: a bad --db fails here, before anything listens
            if stop.received:
                return stop.status
            sock = _bind(host, port)
            try:
                app = create_app(db, token=token, cookie_name=f"hermes_state_token_{sock.getsockname()[1]}", host=host)
                config = uvicorn.Config(
                    app, lifespan="off", log_config=None, access_log=False, server_header=False,
                    proxy_headers=False, timeout_graceful_shutdown=GRACEFUL_SECONDS,
                )
                stop.server = _Server(config, _url(sock, host, token))
                await stop.server.serve(sockets=[sock])
            finally:
                sock.close()
        finally:
            await db.close()
        return stop.status
