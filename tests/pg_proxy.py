"""A loopback TCP proxy in front of the PostgreSQL server that can fail on purpose.

Used to hit the windows a real network opens rarely: the connection dropped
right after the client's COMMIT was forwarded (the server commits, the reply
is lost) or just before it (the server never sees it), and the whole server
going away and coming back (stop/start listening and cut every connection),
which is safer than restarting a server other people share.
"""

from __future__ import annotations

import asyncio
from typing import Literal

# asyncpg commits with a simple-protocol Query message: 'Q', int32 length (12), "COMMIT;\0".
COMMIT_MESSAGE = b"Q\x00\x00\x00\x0cCOMMIT;\x00"

Fault = Literal["after_commit", "before_commit"]


class FaultProxy:
    """Forwards 127.0.0.1:<port> to the target; ``arm()`` drops the next COMMIT's connection."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.armed: Fault | None = None
        self.remaining = 0  # COMMITs still to drop
        self.fired = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listen (on the same port as before after a ``stop()``)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and cut every open connection: the server 'went away'."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.cut_all()

    def cut_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def arm(self, fault: Fault, times: int = 1) -> None:
        """Drop the connection of each of the next ``times`` COMMITs."""
        self.armed, self.remaining = fault, times

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.transport.abort()
            return
        self._writers.update((client_w, server_w))

        def cut() -> None:
            client_w.transport.abort()
            server_w.transport.abort()

        async def upstream() -> None:
            while chunk := await client_r.read(65536):
                if self.armed is not None and COMMIT_MESSAGE in chunk:
                    fault = self.armed
                    self.remaining -= 1
                    if self.remaining <= 0:
                        self.armed = None
                    self.fired += 1
                    client_w.transport.abort()  # the client never hears back
                    if fault == "after_commit":
                        server_w.write(chunk)
                        server_w.close()  # flushes the COMMIT, then EOF
                    else:
                        server_w.transport.abort()
                    return
                server_w.write(chunk)
                await server_w.drain()

        async def downstream() -> None:
            while chunk := await server_r.read(65536):
                client_w.write(chunk)
                await client_w.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            cut()
            self._writers.discard(client_w)
            self._writers.discard(server_w)
