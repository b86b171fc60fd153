"""The tables that hold user data, as a lossless copy carries them: names, keys, column kinds.

``SessionDB.dump_rows`` / ``restore_rows`` (and ``dump_messages`` /
``restore_messages`` for ``messages``) move these tables row by row, every
column the store reports, so a column added by a later schema travels
without a change here. Not carried: ``schema_version``, leases
(``compression_locks`` and any other lease table), PostgreSQL's
``write_batches`` and the search indexes, which each store keeps for itself,
and the ``state_meta`` keys the store writes as its own bookkeeping
(:func:`is_store_meta`).

Both backends read these names; nothing here touches a database.
"""

from __future__ import annotations

import math
from typing import Any

from .limits import INT64_MAX, INT64_MIN

__all__ = [
    "CARRIED_TABLES",
    "COUNTER_COLUMNS",
    "KEYED_TABLES",
    "STORE_META_KEYS",
    "STORE_META_PREFIX",
    "STORE_TABLES",
    "TABLE_KEYS",
    "SESSION_EXTRA_COLUMNS",
    "column_kind",
    "extra_column_names",
    "is_store_meta",
    "stored_value",
]

# Each keyed table's primary key: rows are read in this order and never written twice.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "system_prompts": ("hash",),
    "state_meta": ("key",),
    "gateway_routing": ("scope", "session_key"),
    "async_delegations": ("delegation_id",),
    "sessions": ("id",),
    "session_model_usage": ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"),
}
KEYED_TABLES = tuple(TABLE_KEYS)
# Tables that belong to the store as a whole, not to one session.
STORE_TABLES = ("system_prompts", "state_meta", "gateway_routing", "async_delegations")
# Copy order: what a row refers to comes first (prompts before sessions, sessions before their rows).
CARRIED_TABLES = (*STORE_TABLES, "sessions", "messages", "session_model_usage")
# The session columns that count its message rows: a restore of messages keeps them in step
# with the rows it writes, then sets the source's values once the session is whole.
COUNTER_COLUMNS = ("message_count", "tool_call_count")

# state_meta keys the store writes for itself: the FTS state (every ``fts_*`` key), the
# maintenance helpers' throttle stamps, SQLite's turn-lease fencing counter (each store
# counts its own), PostgreSQL's layout markers (hermes_state.postgres.layout) and
# async-hermes-agent's private layout version.
STORE_META_PREFIX = "fts_"
STORE_META_KEYS = frozenset(
    {"last_auto_prune", "last_vacuum", "last_auto_archive", "turn_lease_token", "postgres_storage_version",
     "hermes_state_postgres_layout", "hermes_state_postgres_definitions", "hermes_state_postgres_migrated_from"}
)

# Column kinds, from a column's declared type: what a value must be to be stored unchanged.
INTEGER, REAL, TEXT, BLOB, CONTENT = "integer", "real", "text", "blob", "content"


# The session columns ``create_session`` takes as keywords beyond its named ones, with their kinds
# (async-hermes-agent's PostgreSQL store took them, e.g. ``title=``). Written only by the call that
# creates the row. Not here: the key and source, the prompt hash (derived) and the counters the
# store keeps in step with the rows (message_count, tool_call_count).
SESSION_EXTRA_COLUMNS: dict[str, str] = {
    **dict.fromkeys(
        ("end_reason", "git_branch", "billing_provider", "billing_base_url", "billing_mode", "cost_status",
         "cost_source", "pricing_version", "title", "title_source", "last_activity_description",
         "last_activity_provenance", "handoff_state", "handoff_platform", "handoff_error",
         "compression_failure_error", "conversation_id"),
        TEXT,
    ),
    **dict.fromkeys(
        ("started_at", "ended_at", "estimated_cost_usd", "actual_cost_usd", "last_activity_at",
         "compression_failure_cooldown_until", "last_read_at"),
        REAL,
    ),
    **dict.fromkeys(
        ("expiry_finalized", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
         "reasoning_tokens", "api_call_count", "compression_fallback_streak", "compression_ineffective_count",
         "rewind_count", "archived", "pinned", "hidden"),
        INTEGER,
    ),
}


def extra_column_names(columns: tuple[tuple[str, Any], ...]) -> list[str]:
    """The names of an ``UpsertSession``'s other columns, each checked against the allow-list (SQL is built from them)."""
    names = [name for name, _ in columns]
    unknown = [name for name in names if name not in SESSION_EXTRA_COLUMNS]
    if unknown:
        raise ValueError(f"not a session column create_session may set: {', '.join(map(repr, unknown))}")
    return names


def is_store_meta(key: str) -> bool:
    """True for a ``state_meta`` key that is the store's own bookkeeping (never copied)."""
    return key.startswith(STORE_META_PREFIX) or key in STORE_META_KEYS


def column_kind(declared: str) -> str:
    """The kind of a column from its declared SQL type (SQLite's affinity rules; PostgreSQL's names fit them)."""
    kind = declared.upper()
    if "INT" in kind:
        return INTEGER
    if any(word in kind for word in ("CHAR", "CLOB", "TEXT")):
        return TEXT
    if "BLOB" in kind or "BYTEA" in kind:
        return BLOB
    if any(word in kind for word in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
        return REAL
    return TEXT


def stored_value(kind: str, value: Any, where: str) -> Any:
    """``value`` as a column of ``kind`` stores it unchanged; ``TypeError``/``ValueError`` naming ``where`` otherwise.

    ``None`` fits every kind. An integer goes into a ``real`` column as a
    float (what the column reads back); ±infinity is kept, NaN is refused
    (SQLite would store NULL). ``content`` (message content) is text or bytes.
    """
    if value is None:
        return None
    if kind == TEXT and isinstance(value, str):
        return value
    if kind == INTEGER and isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{where} must be a signed 64-bit integer; got {value}")
        return value
    if kind == REAL and isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
        if math.isnan(number):
            raise ValueError(f"{where} must not be NaN")
        return number
    if kind == BLOB and isinstance(value, bytes):
        return value
    if kind == CONTENT and isinstance(value, (str, bytes)):
        return value
    wanted = {INTEGER: "an int", REAL: "a number", TEXT: "a str", BLOB: "bytes", CONTENT: "a str or bytes"}[kind]
    raise TypeError(f"{where} must be {wanted} or None, not {type(value).__name__}")
