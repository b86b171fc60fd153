"""hermes-state: durable, fast async storage for AI-agent conversations.

``SessionDB`` is the store. One instance per worker is shared by all of its
agents; writes go through a single writer task in group commits, reads use
their own connection.
"""

from __future__ import annotations

from .compat import (
    _default_db_path as _default_db_path,
    apply_database_pragmas,
    apply_wal_with_fallback,
    format_session_db_unavailable,
    preflight_db_writability,
    resolve_journal_mode,
    resolved_max_export_messages,
    resolved_max_resume_messages,
    workspace_key,
)
from .config import default_db_path, hermes_home
from .errors import (
    PERSISTENCE_ERROR_CAUSES,
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    ConfigError,
    DatabaseMalformedError,
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
from .sqlite.safety import (
    get_last_init_error,
    is_zeroed_state_db,
    quarantine_zeroed_state_db,
    repair_state_db_schema,
)
from .sqlite.schema import FTS_STORAGE_VERSION, SCHEMA_SQL, SCHEMA_VERSION
from .sqlite.search.cjk import _cjk_fts_config_enabled, fts5_cjk_so_path, load_fts5_cjk_extension  # noqa: F401
from .session_turn import SessionTurn
from .store import SessionDB

__version__ = "0.1.0"

DEFAULT_DB_PATH = default_db_path()
MAX_SAFE_RESUME_MESSAGES = 20000
MAX_SAFE_EXPORT_MESSAGES = 20000
MAX_FTS5_QUERY_CHARS = 2048

__all__ = [
    "SessionDB",
    "apply_database_pragmas",
    "apply_wal_with_fallback",
    "format_session_db_unavailable",
    "preflight_db_writability",
    "resolve_journal_mode",
    "resolved_max_export_messages",
    "resolved_max_resume_messages",
    "workspace_key",
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
