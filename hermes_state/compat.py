"""Module-level helpers that other components import from ``hermes_state``.

Hosts built around async-hermes-agent open ``state.db`` with their own
connections (delegation tools, memory plugins) and call these to apply the
same journal-mode and pragma policy as the store. They take a plain DB-API
connection and are synchronous.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .config import StoreConfig, default_db_path, hermes_home, load_config
from .errors import ConfigError
from .sqlite.backend import _preflight
from .sqlite.journal import apply_database_pragmas as _apply_pragmas
from .sqlite.journal import apply_journal_mode
from .sqlite.safety import get_last_init_error

__all__ = [
    "resolve_journal_mode",
    "apply_wal_with_fallback",
    "apply_database_pragmas",
    "preflight_db_writability",
    "format_session_db_unavailable",
    "workspace_key",
    "resolved_max_resume_messages",
    "resolved_max_export_messages",
    "_default_db_path",
]

_WAL_INCOMPATIBLE_MARKERS = ("locking protocol", "not authorized", "disk i/o error")


def _config() -> StoreConfig:
    try:
        return load_config(hermes_home())
    except ConfigError:
        return StoreConfig()


def resolve_journal_mode() -> str:
    """The configured journal mode: ``"wal"`` (default) or ``"delete"``; a bad config means ``"wal"``."""
    return _config().database.journal_mode


def apply_wal_with_fallback(conn: Any, *, db_label: str = "state.db", require_wal: bool = False) -> str:
    """Apply the store's journal-mode policy to ``conn``; returns the mode now in effect.

    WAL unless configured otherwise; a rollback journal on SQLite builds with
    the WAL-reset bug (unless the file is already WAL) and on file systems
    that refuse WAL. ``require_wal=True`` raises ``WalUnsupportedError``
    instead of falling back.
    """
    return apply_journal_mode(conn, resolve_journal_mode(), db_label=db_label, require_wal=require_wal)


def apply_database_pragmas(conn: Any, *, busy_timeout_ms: int = 1000, config: StoreConfig | None = None) -> None:
    """Apply the ``database`` config pragmas, ``foreign_keys=ON`` and a busy timeout to ``conn``."""
    _apply_pragmas(conn, (config or _config()).database, busy_timeout_ms=busy_timeout_ms)


def preflight_db_writability(path: os.PathLike[str] | str, *, db_label: str = "state.db") -> None:
    """Create the parent directory; raise ``sqlite3.OperationalError`` naming an unwritable path."""
    _preflight(Path(path))


def format_session_db_unavailable(prefix: str = "Session database unavailable") -> str:
    """A one-line explanation of the last open failure, with a hint for network file systems."""
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    hint = ""
    if any(marker in cause.lower() for marker in _WAL_INCOMPATIBLE_MARKERS):
        hint = " (state.db may be on a network or FUSE file system that does not support WAL)"
    return f"{prefix}: {cause}{hint}."


def workspace_key(row: Mapping[str, Any]) -> str | None:
    """The workspace a session belongs to: its ``git_repo_root``, else its ``cwd``, else None."""
    return (row.get("git_repo_root") or "").strip() or (row.get("cwd") or "").strip() or None


def resolved_max_resume_messages() -> int:
    """Config ``sessions.max_resume_messages`` (default 20000; 0 disables the guard)."""
    return max(0, int(_config().sessions.max_resume_messages))


def resolved_max_export_messages() -> int:
    """Config ``sessions.max_export_messages`` (default 20000; 0 disables the guard)."""
    return max(0, int(_config().sessions.max_export_messages))


_default_db_path = default_db_path
