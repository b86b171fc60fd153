"""What ``--db`` (or a copy URL) names: a SQLite file or a PostgreSQL server, and how to open it.

Passwords never leave this module unredacted: every message the command
prints goes through :func:`redact`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..config import default_db_path
from ..store import SessionDB
from .errors import NOT_FOUND, CliError

__all__ = ["Target", "parse_target", "redact", "open_store", "same_store", "InspectionSessionDB"]

POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "postgresql+psycopg")
SQLITE_HEADER = b"SQLite format 3\x00"
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"((?:password|passwd|pwd)=)([^&\s]+)", re.IGNORECASE)


def redact(text: str) -> str:
    """Replace every password in URLs inside ``text`` (user:PASSWORD@, password=...) with ``***``."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***\3", text))


@dataclass(frozen=True)
class Target:
    """A store location: ``path`` for SQLite, ``url`` (asyncpg form) for PostgreSQL."""

    path: Path | None = None
    url: str | None = None
    label: str = ""  # the URL as given, password redacted: what messages show

    @property
    def is_postgres(self) -> bool:
        return self.url is not None

    @property
    def host_port(self) -> str:
        """``host:port`` of a PostgreSQL target (port 5432 when the URL has none)."""
        parts = urlsplit(self.url or "")
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}"

    def __str__(self) -> str:
        return self.label or (redact(self.url) if self.url is not None else str(self.path))


def parse_target(text: str | None) -> Target:
    """Read ``--db``: None is ``$HERMES_HOME/state.db``; a postgres URL is normalised to ``postgresql+asyncpg://``."""
    if text is None:
        return Target(path=default_db_path())
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() in POSTGRES_SCHEMES:
        parts = urlsplit(f"postgresql+asyncpg://{rest}")
        if not parts.hostname or not parts.path.strip("/"):
            raise CliError(f"{redact(text)}: a PostgreSQL URL needs a host and a database name")
        return Target(url=urlunsplit(parts), label=redact(text))
    if sep and len(scheme) > 1:
        raise CliError(f"unsupported store URL scheme {scheme!r}: give a file path or a postgresql:// URL")
    return Target(path=Path(text).expanduser())


def same_store(a: Target, b: Target) -> bool:
    """True when both name the same SQLite file (however written) or the same PostgreSQL URL."""
    if a.path is not None and b.path is not None:
        return a.path.resolve() == b.path.resolve()
    return a.url is not None and a.url == b.url


class InspectionSessionDB(SessionDB):
    """A read-only SQLite store that reads an idle WAL file without creating -wal/-shm files."""

    SNAPSHOT_READS = True


def _check_sqlite_file(path: Path, read_only: bool) -> None:
    """Fail with one clear line before the store is built: directories, missing or foreign files."""
    if path.is_dir():
        raise CliError(f"{path} is a directory, not a database file")
    if not path.exists():
        if read_only:
            raise CliError(f"no database at {path} (read commands never create one)", NOT_FOUND)
        return
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except PermissionError:
        raise CliError(f"{path} is not readable by this user") from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    if header and header != SQLITE_HEADER:
        raise CliError(f"{path} is not a SQLite database")


def open_store(target: Target, *, read_only: bool, snapshot: bool = True) -> Any:
    """Build (without opening) the store ``target`` names; read-only stores never create or change files.

    A read-only SQLite store reads an idle WAL file as an immutable snapshot
    unless ``snapshot`` is False: then it sees what other processes commit
    while it is open (and still removes the -wal/-shm files it had to create).
    """
    if target.url is not None:
        try:
            from ..postgres import SessionDB as PostgresSessionDB  # type: ignore[import-not-found,attr-defined,unused-ignore]
        except ImportError as exc:
            raise CliError(f"{target}: the PostgreSQL backend is not available in this installation ({exc})") from None
        return PostgresSessionDB(target.url, read_only=read_only)
    assert target.path is not None
    _check_sqlite_file(target.path, read_only)
    if read_only:
        return (InspectionSessionDB if snapshot else SessionDB)(target.path, read_only=True)
    return SessionDB(target.path)
