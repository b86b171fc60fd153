"""hermes-state: durable, fast async storage for AI-agent conversations.

``SessionDB`` is the store. One instance per worker is shared by all of its
agents; writes go through a single writer task in group commits, reads use
their own connection.

The names below are imported on first use, so ``import hermes_state`` (and
the ``hermes-state`` command's start-up) does not load the drivers, msgspec
or the backends until something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .paths import default_db_path, hermes_home

if TYPE_CHECKING:
    from .compat import (
        _default_db_path as _default_db_path,
        apply_database_pragmas,
        apply_wal_with_fallback,
        format_session_db_unavailable,
        fts5_cjk_so_path,
        is_zeroed_state_db,
        load_fts5_cjk_extension,
        preflight_db_writability,
        quarantine_zeroed_state_db,
        repair_state_db_schema,
        resolve_journal_mode,
        resolved_max_export_messages,
        resolved_max_resume_messages,
        sqlite_source_id,
        workspace_key,
    )
    from .errors import (
        PERSISTENCE_ERROR_CAUSES,
        CompressionSessionBusyError,
        CompressionSessionClosedError,
        ConfigError,
        DatabaseMalformedError,
        EventLoopUnavailableError,
        SearchTimeoutError,
        SessionCompressionInProgressError,
        SessionExportTooLargeError,
        SessionNotFoundError,
        SessionResumeTooLargeError,
        SessionTurnAbortedError,
        SessionTurnLeaseLostError,
        SessionTurnTimeoutError,
        StoreClosedError,
        WalUnsupportedError,
        classify_persistence_error,
        is_disk_full_error,
    )
    from .sqlite.driver import is_sqlite_wal_reset_vulnerable
    from .sqlite.safety import get_last_init_error
    from .sqlite.schema import FTS_STORAGE_VERSION, SCHEMA_SQL, SCHEMA_VERSION
    from .sqlite.search.cjk import _cjk_fts_config_enabled  # noqa: F401
    from .session_turn import SessionTurn
    from .store import SessionDB

__version__ = "0.1.0"

DEFAULT_DB_PATH = default_db_path()
MAX_SAFE_RESUME_MESSAGES = 20000
MAX_SAFE_EXPORT_MESSAGES = 20000
MAX_FTS5_QUERY_CHARS = 2048

# Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("_default_db_path", "apply_database_pragmas", "apply_wal_with_fallback", "format_session_db_unavailable",
         "fts5_cjk_so_path", "is_zeroed_state_db", "load_fts5_cjk_extension", "preflight_db_writability",
         "quarantine_zeroed_state_db", "repair_state_db_schema", "resolve_journal_mode", "resolved_max_export_messages",
         "resolved_max_resume_messages", "sqlite_source_id", "workspace_key"),
        ".compat",
    ),
    **dict.fromkeys(
        ("PERSISTENCE_ERROR_CAUSES", "CompressionSessionBusyError", "CompressionSessionClosedError", "ConfigError",
         "DatabaseMalformedError", "EventLoopUnavailableError", "SearchTimeoutError", "SessionCompressionInProgressError",
         "SessionExportTooLargeError", "SessionNotFoundError", "SessionResumeTooLargeError",
         "SessionTurnLeaseLostError", "SessionTurnTimeoutError", "SessionTurnAbortedError", "StoreClosedError",
         "WalUnsupportedError", "classify_persistence_error", "is_disk_full_error"),
        ".errors",
    ),
    "is_sqlite_wal_reset_vulnerable": ".sqlite.driver",
    "get_last_init_error": ".sqlite.safety",
    **dict.fromkeys(("FTS_STORAGE_VERSION", "SCHEMA_SQL", "SCHEMA_VERSION"), ".sqlite.schema"),
    "_cjk_fts_config_enabled": ".sqlite.search.cjk",
    "SessionDB": ".store",
    "SessionTurn": ".session_turn",
}


def __getattr__(name: str) -> Any:
    """Import a public name (or a subpackage such as ``store``) on first access."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "SessionDB",
    "apply_database_pragmas",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "preflight_db_writability",
    "resolve_journal_mode",
    "resolved_max_export_messages",
    "resolved_max_resume_messages",
    "sqlite_source_id",
    "workspace_key",
    "EventLoopUnavailableError",
    "StoreClosedError",
    "SessionNotFoundError",
    "CompressionSessionBusyError",
    "CompressionSessionClosedError",
    "SessionCompressionInProgressError",
    "SessionResumeTooLargeError",
    "SessionTurnLeaseLostError",
    "SessionTurnTimeoutError",
    "SessionTurnAbortedError",
    "SessionTurn",
    "SessionExportTooLargeError",
    "WalUnsupportedError",
    "ConfigError",
    "SearchTimeoutError",
    "DatabaseMalformedError",
    "PERSISTENCE_ERROR_CAUSES",
    "classify_persistence_error",
    "is_disk_full_error",
    "is_sqlite_wal_reset_vulnerable",
    "get_last_init_error",
    "is_zeroed_state_db",
    "quarantine_zeroed_state_db",
    "repair_state_db_schema",
    "hermes_home",
    "default_db_path",
    "DEFAULT_DB_PATH",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "FTS_STORAGE_VERSION",
    "MAX_SAFE_RESUME_MESSAGES",
    "MAX_SAFE_EXPORT_MESSAGES",
    "MAX_FTS5_QUERY_CHARS",
    "fts5_cjk_so_path",
    "load_fts5_cjk_extension",
]
