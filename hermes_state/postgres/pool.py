"""The read connection pool: SQLAlchemy's QueuePool rules (spec §2.3) over ``asyncpg.connect``.

asyncpg's own ``Pool`` is always LIFO, keeps every connection it opened up to
``max_size`` until an idle timeout, and has no pre-ping or age-based recycle,
so this is a small pool of its own. What asyncpg gives, per connection:
connecting (with ``connect_args``), ``terminate()``, the transaction state.
What this module adds:

* lazy growth: no connection before the first checkout; a checkout takes an
  idle connection, or opens one while fewer than ``pool_size + max_overflow``
  are open, else waits up to ``pool_timeout`` (0: fail at once), first come
  first served, then raises :class:`PoolTimeoutError` (a builtin
  ``TimeoutError`` naming the limit). ``max_overflow = -1`` or
  ``pool_size = 0`` remove the limit;
* at most ``pool_size`` idle connections: an overflow connection returned
  while the idle set is full is closed;
* FIFO reuse (oldest idle first) by default, LIFO with ``pool_use_lifo``;
* ``pool_recycle``: a connection older (since it was opened) than that many
  seconds is replaced at checkout (``-1`` disables);
* ``pool_pre_ping``: a reused connection is pinged at checkout (with the
  command the caller runs first, when it names one: the read transaction's
  ``BEGIN`` answers as well as ``SELECT 1``); if it is gone, every
  connection opened before now is marked for replacement and the checkout
  reconnects once;
* return: an open transaction is rolled back; a connection whose user was
  cancelled or timed out mid-statement, or that lost its server, is
  terminated instead of reused, and its slot freed; a lost server also marks
  every connection opened before now for replacement (as a failed pre-ping);
* metrics with SQLAlchemy's names: ``size``, ``checkedin``, ``checkedout``,
  ``overflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .client_files import Connector
from .config import PostgresConfig
from .errors import is_disconnect
from .failover import connect_at

__all__ = ["PoolTimeoutError", "ConnectionPool", "drop_connection"]

_SLOT = object()  # handed to a waiter: a connection slot is reserved for it; open one


class PoolTimeoutError(TimeoutError):
    """Every allowed connection stayed checked out for ``pool_timeout`` seconds."""


class _Entry:
    __slots__ = ("conn", "created")

    def __init__(self, conn: Any, created: float) -> None:
        self.conn = conn
        self.created = created


class ConnectionPool:
    """Pooled connections for reads; the writer has its own connection."""

    def __init__(self, connector: Connector, config: PostgresConfig, endpoint: str) -> None:
        self._config = config
        self._connector = connector
        self._endpoint = endpoint
        unbounded = config.max_overflow == -1 or config.pool_size == 0
        self.capacity: int | None = None if unbounded else config.pool_size + config.max_overflow
        self._max_idle: int | None = None if config.pool_size == 0 else config.pool_size
        self._idle: deque[_Entry] = deque()
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._open = 0  # connections open or being opened, checked out or idle
        self._invalidated_before = 0.0
        self._closed = True

    async def open(self) -> None:
        """Make the pool usable; no connection is opened until the first checkout."""
        self._closed = False

    # ------------------------------------------------------------------ checkout

    async def _connect(self) -> _Entry:
        return _Entry(await connect_at(self._connector, self._endpoint), time.monotonic())

    def _stale(self, entry: _Entry) -> bool:
        recycle = self._config.pool_recycle
        if entry.conn.is_closed() or entry.created < self._invalidated_before:
            return True
        return recycle > -1 and time.monotonic() - entry.created > recycle

    async def _ping(self, entry: _Entry, first: str | None) -> bool:
        """True when the connection answers (to ``first`` if given); False (and the pool invalidated) when it is gone."""
        try:
            if first is None:
                await entry.conn.fetchval("SELECT 1")
            else:
                await entry.conn.execute(first)
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            self._invalidated_before = time.monotonic()
            return False
        return True

    async def _reuse_or_replace(self, entry: _Entry, first: str | None) -> tuple[_Entry, bool]:
        """Hand out ``entry`` (its slot stays counted), replacing it when stale or dead; and whether
        ``first`` ran on it (as the pre-ping)."""
        try:
            if self._stale(entry):
                entry.conn.terminate()
                return await self._connect(), False
            if self._config.pool_pre_ping:
                if not await self._ping(entry, first):
                    entry.conn.terminate()
                    return await self._connect(), False  # the one retry
                return entry, first is not None
            return entry, False
        except BaseException:
            entry.conn.terminate()
            self._free_slot()
            raise

    async def _open_new(self) -> _Entry:
        """Open a connection in a slot already counted in ``_open``."""
        try:
            return await self._connect()
        except BaseException:
            self._free_slot()
            raise

    async def _checkout(self, first: str | None) -> tuple[_Entry, bool]:
        if self._closed:
            raise RuntimeError("the PostgreSQL pool is closed")
        if self._idle and not self._waiters:
            entry = self._idle.pop() if self._config.pool_use_lifo else self._idle.popleft()
            return await self._reuse_or_replace(entry, first)
        if not self._waiters and (self.capacity is None or self._open < self.capacity):
            self._open += 1
            return await self._open_new(), False
        got = await self._wait()
        if got is _SLOT:
            return await self._open_new(), False
        return await self._reuse_or_replace(got, first)

    async def _wait(self) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        timeout = float(self._config.pool_timeout)
        try:
            done, _ = await asyncio.wait({future}, timeout=timeout if timeout > 0 else 0)
        except asyncio.CancelledError:
            self._abandon(future)
            raise
        if not done:
            self._abandon(future)
            raise PoolTimeoutError(
                f"PostgreSQL pool limit of size {self._config.pool_size} overflow {self._config.max_overflow} "
                f"reached, connection timed out, timeout {self._config.pool_timeout:g}"
            )
        return future.result()

    def _abandon(self, future: asyncio.Future[Any]) -> None:
        """A waiter gave up: pass on whatever it was handed meanwhile."""
        if future.done() and not future.cancelled():
            got = future.result()
            if got is _SLOT:
                self._free_slot()
            else:
                self._put_back(got)
        else:
            future.cancel()
            try:
                self._waiters.remove(future)
            except ValueError:
                pass

    # ------------------------------------------------------------------- return

    def _next_waiter(self) -> asyncio.Future[Any] | None:
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                return future
        return None

    def _free_slot(self) -> None:
        """A connection closed: its slot goes to the first waiter, or back to the pool."""
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(_SLOT)
        else:
            self._open -= 1

    def _put_back(self, entry: _Entry) -> None:
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(entry)
        elif self._closed or (self._max_idle is not None and len(self._idle) >= self._max_idle):
            entry.conn.terminate()  # overflow: closed on return
            self._open -= 1
        else:
            self._idle.append(entry)

    async def _checkin(self, entry: _Entry, discard: bool) -> None:
        if not discard and not entry.conn.is_closed():
            try:
                if entry.conn.is_in_transaction():
                    await entry.conn.execute("ROLLBACK")
            except Exception:
                discard = True
        if discard or entry.conn.is_closed():
            entry.conn.terminate()
            self._free_slot()
        else:
            self._put_back(entry)

    @asynccontextmanager
    async def acquire(self, first: str | None = None) -> AsyncIterator[Any]:
        """Check a connection out for the ``async with`` body; raises PoolTimeoutError at capacity.

        ``first``: a command (no rows) to run before the body; with ``pool_pre_ping`` it is the
        ping of a reused connection, one round trip instead of two.
        """
        entry, ran = await self._checkout(first)
        discard = False
        try:
            if first is not None and not ran:
                await entry.conn.execute(first)
            yield entry.conn
        except BaseException as exc:
            # Cancelled or timed out mid-statement, or the server went away: never reuse it.
            lost = is_disconnect(exc)
            discard = lost or isinstance(exc, (asyncio.CancelledError, TimeoutError))
            if lost:  # the server may have dropped its siblings too: replace them at their next checkout
                self._invalidated_before = time.monotonic()
            raise
        finally:
            await asyncio.shield(self._checkin(entry, discard))

    # ----------------------------------------------------------------- metrics

    def size(self) -> int:
        """The configured ``pool_size``."""
        return self._config.pool_size

    def checkedin(self) -> int:
        """Open idle connections."""
        return len(self._idle)

    def checkedout(self) -> int:
        """Connections currently handed out (or being opened for a checkout)."""
        return self._open - len(self._idle)

    def overflow(self) -> int:
        """Open connections beyond ``pool_size`` (negative while the pool is still growing)."""
        return self._open - self._config.pool_size

    def discard(self) -> None:
        """Drop every idle connection without awaiting anything (they belong to a loop the store left)."""
        self._closed = True
        idle, self._idle = list(self._idle), deque()
        self._open -= len(idle)
        for entry in idle:
            drop_connection(entry.conn)

    async def close(self) -> None:
        """Close the idle connections; ones still checked out close when returned."""
        self._closed = True
        idle, self._idle = list(self._idle), deque()
        for entry in idle:
            self._open -= 1
            try:
                await asyncio.wait_for(entry.conn.close(), timeout=5)
            except Exception:
                entry.conn.terminate()
        while (waiter := self._next_waiter()) is not None:
            waiter.set_exception(RuntimeError("the PostgreSQL pool is closed"))


def drop_connection(conn: Any) -> None:
    """End ``conn`` from outside its event loop (the store moved to another loop); returns at once.

    On its loop when that still runs in another thread; where that loop is
    closed, asyncpg's ``terminate()`` cannot schedule the transport's close,
    so the socket is shut down directly: the server ends the session (and
    rolls back anything it left open) instead of keeping it until garbage
    collection.
    """
    if conn is None or conn.is_closed():
        return
    loop = getattr(conn, "_loop", None)
    if loop is not None and loop.is_running() and not loop.is_closed():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(conn.terminate)
            return
    try:
        conn.terminate()
        return
    except RuntimeError:  # its loop is closed
        pass
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
