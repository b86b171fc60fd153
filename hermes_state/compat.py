"""Module-level helpers that other components import from ``hermes_state``.

Hosts built around async-hermes-agent open ``state.db`` with their own
connections (delegation tools, memory plugins) and call these to apply the
same journal-mode and pragma policy as the store. As in the reference, the
ones that touch files or a connection are coroutines: their file-system work
runs on a worker thread and their statements on the connection's own thread
(an aiosqlite connection), never on the event loop.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

import aiosqlite

from .config import StoreConfig, default_db_path, hermes_home, load_config
from .errors import ConfigError
from .off_loop import off_loop
from .sqlite import safety
from .sqlite.driver import driver_module, run_on
from .sqlite.journal import apply_config_pragmas, apply_journal_mode
from .sqlite.safety import get_last_init_error
from .sqlite.search import cjk

__all__ = [
    "resolve_journal_mode",
    "apply_wal_with_fallback",
    "apply_database_pragmas",
    "preflight_db_writability",
    "format_session_db_unavailable",
    "workspace_key",
    "resolved_max_resume_messages",
    "resolved_max_export_messages",
    "sqlite_source_id",
    "is_zeroed_state_db",
    "quarantine_zeroed_state_db",
    "repair_state_db_schema",
    "fts5_cjk_so_path",
    "load_fts5_cjk_extension",
    "_default_db_path",
]

log = logging.getLogger("hermes_state")

_WAL_INCOMPATIBLE_MARKERS = ("locking protocol", "not authorized", "disk i/o error")


def _config_now() -> StoreConfig:
    try:
        return load_config(hermes_home())
    except ConfigError:
        return StoreConfig()


async def _config() -> StoreConfig:
    """The active profile's config (defaults when config.yaml is bad), read on a worker thread."""
    return await off_loop(_config_now)


def _require_aiosqlite(conn: Any) -> None:
    """Refuse a plain DB-API connection (TypeError): tied to the thread that made it, it would block the loop."""
    if not isinstance(conn, aiosqlite.Connection):
        raise TypeError(f"conn must be an aiosqlite.Connection, not {type(conn).__name__}")


async def resolve_journal_mode() -> str:
    """Return the configured journal mode: ``"wal"`` (default) or ``"delete"``; a bad config means ``"wal"``."""
    return (await _config()).database.journal_mode


async def apply_wal_with_fallback(conn: Any, *, db_label: str = "state.db", require_wal: bool = False) -> str:
    """Apply the store's journal-mode policy to ``conn``; returns the mode now in effect.

    WAL unless configured otherwise; a rollback journal on SQLite builds with
    the WAL-reset bug (unless the file is already WAL) and on file systems
    that refuse WAL. ``require_wal=True`` raises ``WalUnsupportedError``
    instead of falling back. ``conn`` is an aiosqlite connection.
    """
    _require_aiosqlite(conn)
    mode = await resolve_journal_mode()
    return await run_on(conn, lambda raw: apply_journal_mode(raw, mode, db_label=db_label, require_wal=require_wal))


async def apply_database_pragmas(conn: Any, *, db_label: str = "state.db") -> None:
    """Apply the integer pragmas config.yaml's ``database`` section sets (cache_size, mmap_size, ...) to ``conn``.

    Returns None. A config.yaml the store would reject applies nothing (logged under ``db_label``).
    """
    _require_aiosqlite(conn)
    try:
        config = await off_loop(load_config, hermes_home())
    except ConfigError as exc:
        log.warning("%s: database pragmas from config.yaml not applied: %s", db_label, exc)
        return
    await run_on(conn, apply_config_pragmas, config.database)


async def preflight_db_writability(db_path: os.PathLike[str] | str, *, db_label: str = "state.db") -> None:
    """Create the parent directory; raise ``sqlite3.OperationalError`` naming an unwritable path.

    Returns None. In-memory and ``file:`` URI databases are left alone.
    """
    raw = os.fspath(db_path)
    if raw == ":memory:" or raw.startswith("file:"):
        return
    await off_loop(safety.preflight, Path(raw), db_label)


async def is_zeroed_state_db(path: os.PathLike[str] | str, *, probe_bytes: int = 100, force: bool = False) -> bool:
    """Return True when the file is not empty and its first ``probe_bytes`` bytes (at least 16) are all NUL.

    ``force`` is accepted for the reference's signature: this check never
    skips a file that is open in this process, so it changes nothing.
    """
    return await off_loop(safety.is_zeroed_file, path, probe_bytes)


async def quarantine_zeroed_state_db(path: os.PathLike[str] | str) -> Path | None:
    """Move a zeroed database and its sidecars aside; returns the new path, or None if it was not zeroed."""
    return await off_loop(safety.quarantine_zeroed_file, path)


async def repair_state_db_schema(db_path: os.PathLike[str] | str, *, backup: bool = True) -> dict[str, Any]:
    """Repair a damaged ``state.db`` on a worker thread; returns the report (see ``sqlite.safety.repair_database``)."""
    return await off_loop(safety.repair_database, db_path, backup=backup)


async def fts5_cjk_so_path() -> Path:
    """Return where the ``cjk_unicode61`` tokenizer library is expected (it may not exist)."""
    return await off_loop(cjk.cjk_library_path)


async def load_fts5_cjk_extension(conn: Any) -> bool:
    """Load the CJK tokenizer into ``conn`` (an aiosqlite connection); returns whether it is usable."""
    _require_aiosqlite(conn)
    return await run_on(conn, cjk.load_cjk_tokenizer)


def _source_id_now() -> str:
    try:
        conn = driver_module().connect(":memory:")
        try:
            row = conn.execute("SELECT sqlite_source_id()").fetchone()
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - the reference answers "" whenever SQLite cannot say
        return ""
    return str(row[0]) if row and row[0] is not None else ""


async def sqlite_source_id() -> str:
    """Return the linked SQLite's ``sqlite_source_id()`` (the store's driver), or ``""`` when unavailable."""
    return await off_loop(_source_id_now)


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


async def resolved_max_resume_messages() -> int:
    """Config ``sessions.max_resume_messages`` (default 20000; 0 disables the guard)."""
    return max(0, int((await _config()).sessions.max_resume_messages))


async def resolved_max_export_messages() -> int:
    """Config ``sessions.max_export_messages`` (default 20000; 0 disables the guard)."""
    return max(0, int((await _config()).sessions.max_export_messages))


_default_db_path = default_db_path
