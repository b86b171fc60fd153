"""The read connection pool (phase 1: asyncpg's own ``Pool`` behind a thin layer).

What asyncpg's Pool gives here: lazy growth (``min_size=0``: no connection
until the first checkout), a hard cap of ``pool_size + max_overflow``
connections (unbounded when ``max_overflow`` is -1 or ``pool_size`` is 0,
as in SQLAlchemy), reset on return (ROLLBACK, RESET ALL: the forced
read-only setting survives), and a cancelled or failed connection being
terminated rather than reused.

What this layer adds: the checkout timeout error
(:class:`PoolTimeoutError`, a builtin ``TimeoutError`` naming the limit),
connection errors that name host and port (:class:`DatabaseUnavailableError`)
and SQLAlchemy-style metrics (``size``/``checkedin``/``checkedout``/``overflow``).

Not yet (spec §2.3, phase 2): FIFO reuse (asyncpg reuses LIFO whatever
``pool_use_lifo`` says), closing overflow connections on return (asyncpg
keeps them until ``max_inactive_connection_lifetime``, set here to
``pool_recycle`` when positive, else 300 s), age-based recycle, and
pre-ping with one reconnect (``pool_pre_ping`` is accepted but asyncpg
only replaces connections it already knows are closed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .config import PostgresConfig
from .errors import unavailable

__all__ = ["UNBOUNDED", "ConnectionPool", "PoolTimeoutError"]

# asyncpg needs a number; this stands for "no limit" (max_overflow -1 or pool_size 0).
UNBOUNDED = 10_000
_IDLE_LIFETIME = 300.0


class PoolTimeoutError(TimeoutError):
    """Every allowed connection stayed checked out for ``pool_timeout`` seconds."""


class ConnectionPool:
    """Pooled connections for reads; the writer has its own connection."""

    def __init__(self, dsn: str, config: PostgresConfig, connect_kwargs: dict[str, Any], endpoint: str) -> None:
        self._dsn = dsn
        self._config = config
        self._kwargs = connect_kwargs
        self._endpoint = endpoint
        self._pool: Any = None
        self._checked_out = 0
        unbounded = config.max_overflow == -1 or config.pool_size == 0
        self.capacity = UNBOUNDED if unbounded else config.pool_size + config.max_overflow

    async def open(self) -> None:
        """Create the (empty) pool; no connection is made until the first checkout."""
        import asyncpg  # type: ignore[import-untyped]

        recycle = self._config.pool_recycle
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=0,
            max_size=max(1, self.capacity),
            max_inactive_connection_lifetime=recycle if recycle > 0 else _IDLE_LIFETIME,
            **self._kwargs,
        )

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        """Check a connection out for the ``async with`` body; raises PoolTimeoutError at capacity."""
        if self._pool is None:
            raise RuntimeError("the PostgreSQL pool is closed")
        timeout = max(float(self._config.pool_timeout), 0.001)
        try:
            conn = await self._pool.acquire(timeout=timeout)
        except asyncio.TimeoutError:
            raise PoolTimeoutError(
                f"PostgreSQL pool limit of size {self._config.pool_size} overflow {self._config.max_overflow} "
                f"reached, connection timed out, timeout {self._config.pool_timeout:g}"
            ) from None
        except OSError as exc:
            raise unavailable(self._endpoint, exc) from exc
        self._checked_out += 1
        try:
            yield conn
        finally:
            self._checked_out -= 1
            await self._pool.release(conn)

    # SQLAlchemy-style metrics (the tests assert checkedout() == 0 after a scenario).
    def size(self) -> int:
        """The configured ``pool_size``."""
        return self._config.pool_size

    def checkedout(self) -> int:
        """Connections currently handed out."""
        return self._checked_out

    def checkedin(self) -> int:
        """Open idle connections."""
        return 0 if self._pool is None else self._pool.get_idle_size()

    def overflow(self) -> int:
        """Open connections beyond ``pool_size`` (negative while the pool is still growing)."""
        return (0 if self._pool is None else self._pool.get_size()) - self._config.pool_size

    async def close(self) -> None:
        """Close every connection (waits briefly for checked-out ones, then terminates)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=10)
            except (asyncio.TimeoutError, Exception):
                pool.terminate()
