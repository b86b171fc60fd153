"""The SQLite schema (version 25) and what opening a file does to it.

Object names, column order and the FTS trigger gating are shared with
async-hermes-agent, so a ``state.db`` written by either opens in the other.
Everything here is synchronous and runs on the writer connection's thread.
"""

from __future__ import annotations

import logging
from typing import Any

from ..encoding import prompt_hash
from .conversations import CONVERSATION_TRIGGERS_SQL, backfill_conversation_ids
from .driver import driver_module
from .script import run_script  # noqa: F401  (re-exported for the handlers)
from .search.fts_schema import (  # noqa: F401  (fts_triggers_sql and FTS_STORAGE_VERSION are re-exported)
    ALL_TRIGGERS,
    FTS_STORAGE_VERSION,
    BASE_TRIGGERS,
    base_tables_sql,
    drop_triggers,
    ensure_fts,
    fts_triggers_sql,
    probe_fts,
)

__all__ = ["SCHEMA_VERSION", "SCHEMA_SQL", "FTS_STORAGE_VERSION", "prompt_hash", "ensure_schema"]

log = logging.getLogger("hermes_state.sqlite.schema")

SCHEMA_VERSION = 25

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS system_prompts (
    hash TEXT PRIMARY KEY,
    prompt TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    system_prompt_hash TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    title_source TEXT,
    last_activity_at REAL,
    last_activity_description TEXT,
    last_activity_provenance TEXT,
    api_call_count INTEGER DEFAULT 0,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    last_read_at REAL,
    hidden INTEGER NOT NULL DEFAULT 0,
    conversation_id TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)
);

CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    effect_disposition TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT
);

CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);

CREATE TABLE IF NOT EXISTS state_meta (
    key TEXT PRIMARY KEY,
    value TEXT
);

CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
);

CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS session_turn_leases (
    conversation_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    token INTEGER NOT NULL DEFAULT 0,
    holder_host TEXT,
    holder_pid INTEGER,
    holder_started INTEGER
);

CREATE TABLE IF NOT EXISTS session_turn_waiters (
    ticket INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL,
    holder_host TEXT,
    holder_pid INTEGER,
    holder_started INTEGER
);

CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL,
    origin_session_id TEXT NOT NULL DEFAULT '',
    owner_instance_id TEXT,
    lease_expires_at REAL
);

CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id);
CREATE INDEX IF NOT EXISTS idx_messages_assistant_calls_by_session
    ON messages(session_id)
    WHERE role = 'assistant' AND tool_calls IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_turn_leases_expires ON session_turn_leases(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_turn_waiters_conversation ON session_turn_waiters(conversation_id, ticket);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery
    ON async_delegations(delivery_state, completed_at);
"""

# Indexes that name columns older files may only gain through reconciliation.
DEFERRED_INDEX_SQL = """
CREATE INDEX IF NOT EXISTS idx_messages_session_active
    ON messages(session_id, active, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_active_null
    ON messages(active) WHERE active IS NULL;
CREATE INDEX IF NOT EXISTS idx_sessions_session_key
    ON sessions(session_key, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_gateway_peer
    ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_handoff_state
    ON sessions(handoff_state, started_at);
CREATE INDEX IF NOT EXISTS idx_sessions_system_prompt_hash
    ON sessions(system_prompt_hash);
CREATE INDEX IF NOT EXISTS idx_sessions_conversation
    ON sessions(conversation_id);
"""

PLATFORM_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id ON messages(session_id, platform_message_id) "
    "WHERE platform_message_id IS NOT NULL"
)
TITLE_INDEX_SQL = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL"
)

# The FTS objects (both layouts, the optional CJK index, open-time repairs)
# live in ``hermes_state.sqlite.search.fts_schema``; these names stay here
# for code that builds the base schema by hand (bench/append.py).
FTS_TABLES_SQL = base_tables_sql()


# --------------------------------------------------------------------------- open


def _table_columns(conn: Any, table: str, schema: str = "main") -> list[tuple[str, str, int, Any, int]]:
    return [(r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(f"PRAGMA {schema}.table_info({table})")]


def _reconcile_columns(conn: Any) -> None:
    """Add every declared column an older file lacks (ALTER TABLE ADD COLUMN).

    A column another process added meanwhile ("duplicate column") is fine; a
    locked or busy file raises, so the open fails and is retried as a whole
    rather than running behind ``SCHEMA_SQL``; any other failure is logged
    as a warning and the remaining columns are still added.
    """
    scratch = driver_module().connect(":memory:")
    try:
        run_script(scratch, SCHEMA_SQL)
        for table in [r[0] for r in scratch.execute("SELECT name FROM sqlite_master WHERE type='table'")]:
            if table.startswith("sqlite_"):
                continue
            live = {c[0] for c in _table_columns(conn, table)}
            if not live:
                continue
            for name, ctype, notnull, default, pk in _table_columns(scratch, table):
                if name in live:
                    continue
                clause = f'ALTER TABLE {table} ADD COLUMN "{name}" {ctype}'
                if notnull and not pk:
                    clause += " NOT NULL"
                if default is not None:
                    clause += f" DEFAULT {default}"
                try:
                    conn.execute(clause)
                except Exception as exc:
                    text = str(exc).lower()
                    if "duplicate column" in text:
                        continue
                    if "locked" in text or "busy" in text:
                        raise
                    log.warning("could not add column %s.%s, the store remains behind SCHEMA_SQL: %s", table, name, exc)
    finally:
        scratch.close()


def _heal_usage_primary_key(conn: Any) -> None:
    """Rebuild ``session_model_usage`` when its primary key predates ``task``."""
    pk_cols = [c[0] for c in _table_columns(conn, "session_model_usage") if c[4]]
    if "task" in pk_cols or not pk_cols:
        return
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ALTER TABLE session_model_usage RENAME TO session_model_usage_legacy_pk")
        conn.execute("DROP INDEX IF EXISTS idx_session_model_usage_session")
        conn.execute("DROP INDEX IF EXISTS idx_session_model_usage_model")
        start = SCHEMA_SQL.index("CREATE TABLE IF NOT EXISTS session_model_usage")
        end = SCHEMA_SQL.index(";", start)
        conn.execute(SCHEMA_SQL[start:end])
        cols = [c[0] for c in _table_columns(conn, "session_model_usage_legacy_pk")]
        keys = ("billing_provider", "billing_base_url", "billing_mode", "task")
        shared = [c for c in cols if c in {x[0] for x in _table_columns(conn, "session_model_usage")}]
        select = ", ".join(f"COALESCE({c}, '')" if c in keys else c for c in shared)
        conn.execute(
            f"INSERT OR IGNORE INTO session_model_usage ({', '.join(shared)}) "
            f"SELECT {select} FROM session_model_usage_legacy_pk"
        )
        conn.execute("DROP TABLE session_model_usage_legacy_pk")
        conn.execute("CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id)")
        conn.execute("CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model)")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute("PRAGMA foreign_keys=ON")


def _ensure_title_index(conn: Any) -> None:
    try:
        conn.execute(TITLE_INDEX_SQL)
        return
    except Exception as exc:
        if "unique" not in str(exc).lower() and "constraint" not in str(exc).lower():
            log.warning("could not create the unique title index: %s", exc)
            return
    # Duplicate titles in an old file: the newest row keeps each title.
    conn.execute(
        "UPDATE sessions SET title = NULL WHERE title IS NOT NULL AND EXISTS ("
        "SELECT 1 FROM sessions AS newer WHERE newer.title = sessions.title AND newer.rowid > sessions.rowid)"
    )
    log.warning("cleared duplicate session titles so the unique title index could be created")
    conn.execute(TITLE_INDEX_SQL)


def _migrate_inline_prompts(conn: Any) -> None:
    rows = conn.execute(
        "SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL AND system_prompt <> ''"
    ).fetchall()
    for session_id, prompt in rows:
        digest = prompt_hash(prompt)
        conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, prompt))
        conn.execute(
            "UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL WHERE id = ?", (digest, session_id)
        )


def _backfill_usage_ledger(conn: Any) -> None:
    conn.execute(
        """
        INSERT OR IGNORE INTO session_model_usage (
            session_id, model, billing_provider, billing_base_url, billing_mode, task,
            api_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
            reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status, cost_source,
            first_seen, last_seen)
        SELECT id, COALESCE(NULLIF(model, ''), 'unknown'), COALESCE(billing_provider, ''),
               COALESCE(billing_base_url, ''), COALESCE(billing_mode, ''), '',
               COALESCE(api_call_count, 0), COALESCE(input_tokens, 0), COALESCE(output_tokens, 0),
               COALESCE(cache_read_tokens, 0), COALESCE(cache_write_tokens, 0),
               COALESCE(reasoning_tokens, 0), COALESCE(estimated_cost_usd, 0),
               COALESCE(actual_cost_usd, 0), cost_status, cost_source,
               started_at, COALESCE(ended_at, started_at)
        FROM sessions
        WHERE COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0)
              + COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0) > 0
        """
    )


def _tag_delegate_children(conn: Any) -> None:
    conn.execute(
        """
        UPDATE sessions SET model_config = json_set(COALESCE(model_config, '{}'), '$._delegate_from', parent_session_id)
        WHERE parent_session_id IS NOT NULL
          AND json_valid(COALESCE(model_config, '{}'))
          AND json_extract(COALESCE(model_config, '{}'), '$._delegate_from') IS NULL
          AND json_extract(COALESCE(model_config, '{}'), '$._branched_from') IS NULL
          AND json_extract(COALESCE(model_config, '{}'), '$._reset_from') IS NULL
          AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id
                          AND p.end_reason IN ('compression', 'branched', 'session_reset', 'session_switch',
                                               'idle', 'daily', 'suspended', 'resume_pending_expired'))
        """
    )


def ensure_schema(conn: Any, *, fts_enabled: bool = True, cjk_loaded: bool = False) -> dict[str, Any]:
    """Create or migrate the schema of a writable file; returns facts about it.

    Runs outside one big transaction on purpose: the base script is idempotent
    and the steps that rewrite data open their own ``BEGIN IMMEDIATE``.
    """
    prior = None
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone():
        row = conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
        prior = None if row is None else int(row[0])

    run_script(conn, SCHEMA_SQL)
    _reconcile_columns(conn)
    _heal_usage_primary_key(conn)
    try:
        conn.execute(PLATFORM_INDEX_SQL)
    except Exception as exc:
        log.debug("platform message index: %s", exc)
    run_script(conn, DEFERRED_INDEX_SQL)
    run_script(conn, CONVERSATION_TRIGGERS_SQL)

    has_fts = fts_enabled and probe_fts(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("UPDATE messages SET active = 1 WHERE active IS NULL")
        backfill_conversation_ids(conn)
        if prior is None:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
        elif prior < SCHEMA_VERSION:
            if prior < 16:
                _tag_delegate_children(conn)
            if prior < 20:
                _backfill_usage_ledger(conn)
            if prior < 25:
                # In the same transaction as the version bump: a failure leaves every
                # prompt inline and the version below 25, so the next open redoes it.
                _migrate_inline_prompts(conn)
            if has_fts:
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise

    _ensure_title_index(conn)

    if has_fts:
        fts = ensure_fts(conn, prior_version=prior, cjk_loaded=cjk_loaded)
    else:
        # Without FTS5 the triggers would make every message insert fail.
        fts = {"fts": "none", "trigram": False, "cjk": False}
        drop_triggers(conn, ALL_TRIGGERS)
    version = conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
    return {"schema_version": int(version[0]) if version else None, "prior_version": prior, **fts}

