"""Turn-lease releases from other processes, through PostgreSQL's LISTEN/NOTIFY.

A release notifies channel ``hermes_turn_lease`` with ``[schema, md5 of the
conversation id]`` in the releasing transaction (delivered at COMMIT, to every listener
of the database). A store starts listening on a connection of its own the
first time one of its callers waits for a lease, and hands each notice for
its schema to the process-wide wake-up registry (``lease_wakeups``). Nothing
is lost when the listener is down: waiters still look at the lease every
poll interval, and the listener reconnects at the next wait (at most every
few seconds).

A LISTEN that goes through a transaction pooler is accepted and then hears
nothing (the pooler lends the server connection to others between
statements). So once listening, the listener checks, in the background, that
a notification really arrives: it notifies a probe channel of its own from
another connection and waits a few seconds. If none arrives it logs one
warning (waiters poll; the fix is ``listen_url``, a direct URL for this
connection), closes the connection and stops trying.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ..lease_wakeups import notify_release
from .handlers.turn_leases import LEASE_CHANNEL
from .pool import drop_connection

__all__ = ["LeaseReleaseListener"]

log = logging.getLogger("hermes_state.postgres")

RETRY_SECONDS = 5.0
PROBE_SECONDS = 5.0  # how long the check waits for its own notification

DEAF_WARNING = (
    "turn-lease wake-ups from other processes cannot arrive: the LISTEN connection received no notification "
    "within %gs (a transaction pooler such as PgBouncer in transaction mode drops them); waiters will poll "
    "the lease every poll interval instead. Fix: give the listener a direct connection with listen_url "
    "(a URL parameter, or database.postgres.listen_url in config.yaml)"
)


class LeaseReleaseListener:
    """One LISTEN connection per store, opened on first use, closed with the store.

    ``notify(channel)`` sends a notification on ``channel`` from another
    connection (the check that notifications arrive).
    """

    def __init__(
        self, connect: Callable[[], Awaitable[Any]], database: str, notify: Callable[[str], Awaitable[None]]
    ) -> None:
        self._connect = connect
        self._database = database
        self._notify = notify
        self._conn: Any = None
        self._schema: str | None = None
        self._lock: asyncio.Lock | None = None
        self._failed_at = float("-inf")
        self._probe: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[bool] | None = None
        self.notices = 0  # releases seen for this schema (tests and stats)
        self.deaf = False  # the check heard nothing: waiters poll, no more attempts
        self.verified = False  # the check heard its own notification

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def start(self) -> None:
        """Start listening (and the check) in the background, without waiting for it."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self.ensure())

    async def ensure(self) -> bool:
        """Listen unless already listening (or a recent attempt failed); returns whether it listens."""
        if self.listening:
            return True
        if self.deaf or time.monotonic() - self._failed_at < RETRY_SECONDS:
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.listening:
                return True
            conn = None
            try:
                conn = await self._connect()
                async with conn.transaction():  # behind a pooler, search_path comes with BEGIN
                    self._schema = await conn.fetchval("SELECT current_schema()")
                await conn.add_listener(LEASE_CHANNEL, self._on_notice)
            except Exception as exc:
                self._failed_at = time.monotonic()
                log.warning("cannot listen for turn-lease releases (%s); waiters poll instead", exc)
                if conn is not None:
                    conn.terminate()
                return False
            self._conn = conn
            if not self.verified and self._probe is None:
                self._probe = asyncio.get_running_loop().create_task(self._check(conn))
            return True

    async def _check(self, conn: Any) -> None:
        """Notify a probe channel of our own from another connection; no notice in time: deaf."""
        channel = f"hermes_probe_{uuid.uuid4().hex}"
        heard = asyncio.Event()

        def on_probe(*_: Any) -> None:
            heard.set()

        try:
            await conn.add_listener(channel, on_probe)
            await self._notify(channel)
        except Exception as exc:  # the store's connections failed meanwhile: check again next time
            log.debug("turn-lease listener check failed: %s", exc)
            self._probe = None
            return
        try:
            await asyncio.wait_for(heard.wait(), PROBE_SECONDS)
        except TimeoutError:
            self.deaf = True
            log.warning(DEAF_WARNING, PROBE_SECONDS)
            if self._conn is conn:
                self._conn = None
            conn.terminate()
            return
        self.verified = True
        try:
            await conn.remove_listener(channel, on_probe)
        except Exception as exc:
            log.debug("turn-lease listener probe channel stays: %s", exc)

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
        for task in (self._starting, self._probe):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._starting = self._probe = None
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()
