"""SQLAlchemy Core connections for host code that brings its own SQL.

async-hermes-agent's async delegation keeps its rows (table
``async_delegations``) with SQL of its own, written against SQLAlchemy Core:
it hands the store a coroutine function and expects it awaited with an
``AsyncConnection``, inside a transaction for a write. ``SessionDB._read`` /
``_write`` on PostgreSQL do that through :class:`CoreBoundary`.

SQLAlchemy is not a dependency: it is imported (off the event loop) on the
first such call, and a store that never gets one never loads it. The
engine's connections are made exactly as the store's own (the same URL
translation, connect arguments and read-only setting, on asyncpg) in a pool
of their own sized by the profile's ``database.postgres`` options. Those
transactions are the host's: they do not go through the write queue, so
they are not ordered with the store's queued writes (PostgreSQL's
transactions and row locks order them, as between worker processes).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..off_loop import off_loop
from .config import PostgresConfig

__all__ = ["CoreBoundary"]

T = TypeVar("T")
Operation = Callable[[Any], Awaitable[T]]

_MISSING = (
    "SessionDB._read/_write run SQLAlchemy Core operations and need SQLAlchemy with asyncio support: "
    "pip install 'sqlalchemy[asyncio]>=2.0.16'"
)


def _load_sqlalchemy() -> Any:
    try:
        return importlib.import_module("sqlalchemy.ext.asyncio")
    except ImportError as exc:
        raise ImportError(_MISSING) from exc


class CoreBoundary:
    """A SQLAlchemy ``AsyncEngine`` over the store's own connection recipe, made on first use."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], config: PostgresConfig) -> None:
        self._connect = connect
        self._config = config
        self._engine: Any = None
        self._lock = asyncio.Lock()

    async def _get_engine(self) -> Any:
        async with self._lock:
            if self._engine is None:
                module = await off_loop(_load_sqlalchemy)
                cfg = self._config
                self._engine = module.create_async_engine(
                    "postgresql+asyncpg://",
                    async_creator=self._connect,
                    pool_size=cfg.pool_size,
                    max_overflow=cfg.max_overflow,
                    pool_timeout=cfg.pool_timeout,
                    pool_recycle=cfg.pool_recycle,
                    pool_pre_ping=cfg.pool_pre_ping,
                    pool_use_lifo=cfg.pool_use_lifo,
                )
            return self._engine

    async def read(self, operation: Operation[T]) -> T:
        """Await ``operation(connection)`` on a connection of the engine; returns its result (nothing is committed)."""
        engine = await self._get_engine()
        async with engine.connect() as connection:
            return await operation(connection)

    async def write(self, operation: Operation[T]) -> T:
        """Await ``operation(connection)`` in a transaction committed when it returns; returns its result."""
        engine = await self._get_engine()
        async with engine.begin() as connection:
            return await operation(connection)

    async def close(self) -> None:
        """Close the engine's connections (a no-op when no operation ever ran)."""
        async with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            await engine.dispose()
