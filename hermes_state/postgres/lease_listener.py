"""Turn-lease releases from other processes, through PostgreSQL's LISTEN/NOTIFY.

A release notifies channel ``hermes_turn_lease`` with ``[schema, md5 of the
conversation id]`` in the releasing transaction (delivered at COMMIT, to every listener
of the database). A store starts listening on a connection of its own the
first time one of its callers waits for a lease, and hands each notice for
its schema to the process-wide wake-up registry (``lease_wakeups``). Nothing
is lost when the listener is down: waiters still look at the lease every
poll interval, and the listener reconnects at the next wait (at most every
few seconds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..lease_wakeups import notify_release
from .handlers.turn_leases import LEASE_CHANNEL
from .pool import drop_connection

__all__ = ["LeaseReleaseListener"]

log = logging.getLogger("hermes_state.postgres")

RETRY_SECONDS = 5.0


class LeaseReleaseListener:
    """One LISTEN connection per store, opened on first use, closed with the store."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], database: str) -> None:
        self._connect = connect
        self._database = database
        self._conn: Any = None
        self._schema: str | None = None
        self._lock: asyncio.Lock | None = None
        self._failed_at = float("-inf")
        self.notices = 0  # releases seen for this schema (tests and stats)

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> bool:
        """Listen unless already listening (or a recent attempt failed); returns whether it listens."""
        if self.listening:
            return True
        if time.monotonic() - self._failed_at < RETRY_SECONDS:
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.listening:
                return True
            conn = None
            try:
                conn = await self._connect()
                self._schema = await conn.fetchval("SELECT current_schema()")
                await conn.add_listener(LEASE_CHANNEL, self._on_notice)
            except Exception as exc:
                self._failed_at = time.monotonic()
                log.warning("cannot listen for turn-lease releases (%s); waiters poll instead", exc)
                if conn is not None:
                    conn.terminate()
                return False
            self._conn = conn
            return True

    def _on_notice(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            schema, key = json.loads(payload)
        except (ValueError, TypeError):
            return
        if schema == self._schema and isinstance(key, str):
            self.notices += 1
            notify_release(self._database, key)

    def discard(self) -> None:
        """Forget the connection of a loop the store left (the next wait listens again, on the new loop)."""
        conn, self._conn = self._conn, None
        self._lock = None
        drop_connection(conn)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()
