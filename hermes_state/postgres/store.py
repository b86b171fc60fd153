"""``SessionDB`` on PostgreSQL: the same facade, commands and actor; only the backend differs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..backend import Backend
from ..facade import captured_home
from ..store import SessionDB as _SQLiteSessionDB
from .dsn import redact_dsn, validate_dsn

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
    """

    def __init__(
        self,
        db_path: os.PathLike[str] | str | None = None,
        read_only: bool = False,
        *,
        read_replicas: Sequence[str] | None = None,
    ) -> None:
        self._read_replicas = _replica_urls(read_replicas)
        super().__init__(db_path, read_only)

    def _accept_target(self, db_path: os.PathLike[str] | str | None) -> None:
        self._dsn: str = validate_dsn(db_path)
        # Hosts and tools read ``db_path``; it never holds the password.
        self.db_path: Any = redact_dsn(self._dsn)

    def _make_backend(self) -> Backend:
        from .backend import PostgresBackend

        return PostgresBackend(
            self._dsn, read_only=self.read_only, home=captured_home(), read_replicas=self._read_replicas
        )

    def _target_label(self) -> str:
        return redact_dsn(self._dsn)


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
