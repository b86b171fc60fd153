"""``SessionDB`` on PostgreSQL: the same facade, commands and actor; only the backend differs."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..backend import Backend
from ..commands.base import Command
from ..facade import captured_home
from ..store import SessionDB as _SQLiteSessionDB
from .dsn import redact_dsn, validate_dsn
from .pooler import POOLER_MODES

if TYPE_CHECKING:
    from .backend import PostgresBackend
    from .core_boundary import CoreBoundary

__all__ = ["SessionDB"]


class SessionDB(_SQLiteSessionDB):
    """An async session store on PostgreSQL, shared by every agent of one worker.

    ``SessionDB("postgresql+asyncpg://user@host:5432/db", read_only=False)``
    (or a ``postgresql+psycopg://`` URL: the driver is asyncpg either way)
    validates the URL and records it; nothing connects until the first
    awaited call, which reads ``database.postgres`` from the profile's
    ``config.yaml`` (the ``HERMES_HOME`` in effect at construction). A
    read-only store raises ``PermissionError`` from every write before any
    I/O. Await ``close()`` once at shutdown: it applies every queued write,
    then closes the connections.

    ``read_replicas=[url, ...]`` (or ``database.postgres.read_replicas``)
    sends reads to those standbys; a read after this store's own write still
    sees it (see :mod:`hermes_state.postgres.replicas` and ``writer_stats()["read_routing"]``).
    ``pooler="transaction"`` says the URL reaches the server through a
    transaction pooler (PgBouncer); ``listen_url`` is a direct URL for the
    turn-lease listener behind one. Each wins over the URL parameter of the
    same name, which wins over ``database.postgres`` in ``config.yaml``
    (docs/postgres-operations.md).
    """

    def __init__(
        self,
        db_path: os.PathLike[str] | str | None = None,
        read_only: bool = False,
        *,
        read_replicas: Sequence[str] | None = None,
        pooler: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        self._read_replicas = _replica_urls(read_replicas)
        self._store_options = _store_options(pooler, listen_url)
        super().__init__(db_path, read_only)

    def _accept_target(self, db_path: os.PathLike[str] | str | None) -> None:
        self._dsn: str = validate_dsn(db_path)
        # Hosts and tools read ``db_path``; it never holds the password.
        self.db_path: Any = redact_dsn(self._dsn)

    def _make_backend(self) -> Backend:
        from .backend import PostgresBackend

        return PostgresBackend(
            self._dsn, read_only=self.read_only, home=captured_home(), read_replicas=self._read_replicas,
            store_options=self._store_options,
        )

    def _target_label(self) -> str:
        return redact_dsn(self._dsn)

    async def _read(self, operation: Callable[[Any], Awaitable[Any]]) -> Any:
        """Await ``operation(connection)`` with a SQLAlchemy Core ``AsyncConnection``; returns its result.

        For host code with SQL of its own (async-hermes-agent's async
        delegation binds a PostgreSQL store by these two methods). Nothing is
        committed. Needs SQLAlchemy (imported on the first call); see
        :mod:`hermes_state.postgres.core_boundary`.
        """
        if not callable(operation):
            raise TypeError(f"operation must be a coroutine function taking a connection, not {type(operation).__name__}")
        await self._ensure_open()
        return await self._core().read(operation)

    def _write(self, command: Any, **options: Any) -> Coroutine[Any, Any, Any]:  # type: ignore[override]
        """Queue a store command (the facade's path), or run a host's SQLAlchemy Core write; returns the awaitable.

        Given a coroutine function instead of a command, awaiting the result
        awaits ``operation(connection)`` in a transaction that commits when
        it returns, and gives its result; it does not go through the write
        queue. A read-only store raises ``PermissionError`` first. (A plain
        method, so the store's own writes pay no extra coroutine.)
        """
        if isinstance(command, Command):
            return super()._write(command, **options)
        return self._core_write(command, options)

    async def _core_write(self, operation: Any, options: dict[str, Any]) -> Any:
        if not callable(operation) or options:
            raise TypeError(f"operation must be a coroutine function taking a connection, not {type(operation).__name__}")
        if self.read_only:
            raise self._backend.readonly_error()
        await self._ensure_open()
        return await self._core().write(operation)

    def _core(self) -> CoreBoundary:
        return cast("PostgresBackend", self._backend).core()


def _store_options(pooler: Any, listen_url: Any) -> dict[str, str]:
    """The constructor's ``pooler`` and ``listen_url`` (those given), checked; raises TypeError/ValueError naming them."""
    options: dict[str, str] = {}
    if pooler is not None:
        if not isinstance(pooler, str):
            raise TypeError(f"pooler must be a str, not {type(pooler).__name__}")
        if pooler not in POOLER_MODES:
            raise ValueError(f"pooler must be one of {', '.join(POOLER_MODES)}, not {pooler!r}")
        options["pooler"] = pooler
    if listen_url is not None:
        if not isinstance(listen_url, str):
            raise TypeError(f"listen_url must be a str, not {type(listen_url).__name__}")
        try:
            validate_dsn(listen_url)
        except ValueError as exc:
            raise ValueError(f"listen_url: {exc}") from None
        options["listen_url"] = listen_url
    return options


def _replica_urls(urls: Sequence[str] | None) -> tuple[str, ...]:
    """The constructor's ``read_replicas``, each a valid PostgreSQL URL; raises TypeError/ValueError naming it."""
    if urls is None:
        return ()
    if isinstance(urls, (str, bytes)) or not isinstance(urls, Sequence):
        raise TypeError("read_replicas must be a list of postgresql+asyncpg:// URLs")
    for index, url in enumerate(urls):
        try:
            validate_dsn(url)
        except ValueError as exc:
            raise ValueError(f"read_replicas[{index}]: {exc}") from None
    return tuple(urls)
