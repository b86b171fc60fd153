"""Journal-mode selection for a writable connection, and the pragmas that follow it.

WAL is the goal: readers never block the writer and one fsync covers a whole
group commit. Two things can stand in the way: a linked SQLite inside the
WAL-reset corruption range (then a file that is not already WAL gets a
rollback journal), and file systems that refuse WAL (network mounts), where
the store falls back to DELETE and says so.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from ..errors import WalUnsupportedError
from .driver import is_sqlite_wal_reset_vulnerable

__all__ = ["read_journal_mode", "apply_journal_mode", "apply_config_pragmas", "apply_database_pragmas", "WAL_SIZE_LIMIT"]

log = logging.getLogger("hermes_state.sqlite.journal")

WAL_SIZE_LIMIT = 64 * 1024 * 1024
_WAL_REFUSAL_MARKERS = ("locking protocol", "not authorized", "disk i/o error")
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def read_journal_mode(conn: Any) -> str:
    """Return the file's journal mode, retrying transient I/O errors; "unknown" on failure."""
    for attempt in range(5):
        try:
            return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        except Exception as exc:
            if "disk i/o error" not in str(exc).lower() or attempt == 4:
                return "unknown"
            time.sleep(0.05)
    return "unknown"


def _wal_extras(conn: Any) -> None:
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    if sys.platform == "darwin":
        conn.execute("PRAGMA checkpoint_fullfsync=1")


def _set_delete(conn: Any, configured: str) -> str:
    mode = str(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower()
    if mode != "delete" and configured == "delete":
        import sqlite3

        raise sqlite3.OperationalError(f"could not set configured journal_mode=delete (got {mode})")
    return mode


def apply_journal_mode(conn: Any, configured: str = "wal", *, db_label: str = "state.db", require_wal: bool = False) -> str:
    """Choose and set the journal mode; returns the mode now in effect."""
    current = read_journal_mode(conn)
    if is_sqlite_wal_reset_vulnerable():
        if current == "wal":
            _warn_once("vuln-wal", "SQLite %s is affected by the WAL-reset bug; keeping the existing WAL file", db_label)
            _wal_extras(conn)
            return "wal"
        _warn_once("vuln", "SQLite is affected by the WAL-reset bug; using a rollback journal for %s", db_label)
        if require_wal:
            raise WalUnsupportedError(f"WAL refused for {db_label}: the linked SQLite has the WAL-reset bug")
        return _set_delete(conn, configured)
    if current == "wal":
        _wal_extras(conn)
        return "wal"
    if configured == "delete":
        return _set_delete(conn, configured)
    last_error: Exception | None = None
    for attempt in range(3):
        try:
            mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except Exception as exc:
            text = str(exc).lower()
            if not any(marker in text for marker in _WAL_REFUSAL_MARKERS):
                raise
            last_error = exc
            if "disk i/o error" in text and attempt < 2:
                time.sleep(0.05)
                continue
            break
        if mode == "wal":
            _wal_extras(conn)
            return "wal"
        if require_wal:
            raise WalUnsupportedError(f"WAL journal_mode unsupported for {db_label} (got {mode})")
        _warn_once(f"refused:{db_label}", "WAL journal_mode unsupported for %s; using %s", db_label, mode)
        return mode or "delete"
    if read_journal_mode(conn) == "wal" and last_error is not None:
        raise last_error
    if require_wal:
        raise WalUnsupportedError(f"WAL journal_mode unsupported for {db_label}: {last_error}")
    _warn_once(f"fallback:{db_label}", "WAL unavailable for %s (%s); using a rollback journal", db_label, last_error)
    return _set_delete(conn, configured)


def apply_config_pragmas(conn: Any, config: Any) -> None:
    """Apply the optional integer pragmas of the ``database`` config section (those it sets)."""
    for name in ("cache_size", "mmap_size", "temp_store", "wal_autocheckpoint", "journal_size_limit"):
        value = getattr(config, name, None)
        if value is not None:
            conn.execute(f"PRAGMA {name}={int(value)}")


def apply_database_pragmas(conn: Any, config: Any, *, busy_timeout_ms: int) -> None:
    """The store's own connections: the config pragmas, ``synchronous``, foreign keys and a busy timeout."""
    apply_config_pragmas(conn, config)
    conn.execute(f"PRAGMA synchronous={getattr(config, 'synchronous', 'full').upper()}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
