"""Full-text index objects: their DDL, what opening a file does to them, and repairs.

Three layouts can be met on disk (spec §1.5):

* **current** (schema v23+, FTS storage version 1): ``messages_fts`` and
  ``messages_fts_trigram`` are external-content FTS5 tables over
  ``messages`` (and a view of its non-tool rows); triggers keep them in step
  and skip the id range a deferred rebuild still has to reach.
* **CJK** (optional, next to the current layout): ``messages_fts_cjk`` with
  the ``cjk_unicode61`` tokenizer, its own view, triggers and rebuild range.
* **legacy inline** (schema v11..v22): ordinary FTS5 tables holding their own
  copy of ``content || ' ' || tool_name || ' ' || tool_calls``; kept working
  until ``optimize_fts_storage`` migrates it.

Every function takes a raw DB-API connection and runs on the writer thread.
Functions that only issue statements run inside whatever transaction the
caller holds; ``ensure_fts`` manages its own.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from typing import Any

from ..driver import driver_module
from ..script import run_script

__all__ = [
    "FTS_STORAGE_VERSION",
    "ALL_TRIGGERS",
    "BASE_TRIGGERS",
    "CJK_TRIGGERS",
    "FTS_TABLES",
    "REBUILD_CHUNK_ROWS",
    "TRASH_PREFIX",
    "base_tables_sql",
    "cjk_objects_sql",
    "cjk_tokenizer_loaded",
    "delete_meta",
    "detach_fts",
    "drop_triggers",
    "ensure_fts",
    "fts_layout",
    "fts_triggers_sql",
    "get_meta",
    "index_empty_with_messages",
    "legacy_tables_sql",
    "legacy_triggers_sql",
    "present_tables",
    "probe_fts",
    "rebuild_in_place",
    "reset_cjk_index",
    "seed_rebuild_markers",
    "set_meta",
    "trash_tables",
]

log = logging.getLogger("hermes_state.sqlite.search")

# The FTS storage layout version recorded in the file's metadata once nothing is pending.
FTS_STORAGE_VERSION = 1

# Errors of either SQLite driver (stdlib sqlite3 or pysqlite3).
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, driver_module().Error)

FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
BASE_TRIGGERS = (
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)
CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")
ALL_TRIGGERS = BASE_TRIGGERS + CJK_TRIGGERS
TRASH_PREFIX = "fts_v22_trash_"
REBUILD_CHUNK_ROWS = 500

BASE_KEYS = ("fts_rebuild_high_water", "fts_rebuild_progress")
CJK_KEYS = ("fts_cjk_rebuild_high_water", "fts_cjk_rebuild_progress")

# ------------------------------------------------------------------ DDL text

# A row id is indexed unless a deferred rebuild still has to reach it.
_GATE = """(({ref}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = '{prefix}_high_water'), -1))
   OR ({ref}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = '{prefix}_progress'), -1)))"""


def _gate(ref: str, prefix: str = "fts_rebuild") -> str:
    return _GATE.format(ref=ref, prefix=prefix)


def base_tables_sql(*, trigram: bool = True) -> str:
    """The current layout's tables (and the trigram source view)."""
    sql = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content,
    tool_name,
    tool_calls,
    content='messages',
    content_rowid='id'
);
"""
    if trigram:
        sql += _substring_index_sql("messages_fts_trigram", "trigram")
    return sql


def _substring_index_sql(table: str, tokenizer: str) -> str:
    # The trigram and CJK indexes read non-tool rows through a view.
    return f"""
CREATE VIEW IF NOT EXISTS {table}_src AS
    SELECT id, role, content, tool_name, tool_calls
    FROM messages
    WHERE role <> 'tool';
CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(
    content,
    tool_name,
    tool_calls,
    content='{table}_src',
    content_rowid='id',
    tokenize='{tokenizer}'
);
"""


def _substring_triggers_sql(table: str, prefix: str) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
   AND {_gate('new', prefix)}
BEGIN
    INSERT INTO {table}(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
   AND {_gate('old', prefix)}
BEGIN
    INSERT INTO {table}({table}, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS {table}_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls
    OR old.role IS NOT new.role)
   AND {_gate('old', prefix)}
BEGIN
    INSERT INTO {table}({table}, rowid, content, tool_name, tool_calls)
    SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls
    WHERE old.role <> 'tool';
    INSERT INTO {table}(rowid, content, tool_name, tool_calls)
    SELECT new.id, new.content, new.tool_name, new.tool_calls
    WHERE new.role <> 'tool';
END;
"""


def fts_triggers_sql(*, trigram: bool = True) -> str:
    """The gated triggers that keep ``messages_fts`` (and the trigram index) in step."""
    sql = f"""
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN {_gate('new')}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN {_gate('old')}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls)
   AND {_gate('old')}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;
"""
    if trigram:
        sql += _substring_triggers_sql("messages_fts_trigram", "fts_rebuild")
    return sql


def cjk_objects_sql() -> tuple[str, str]:
    """(table + view DDL, trigger DDL) of the optional CJK bigram index."""
    return (
        _substring_index_sql("messages_fts_cjk", "cjk_unicode61"),
        _substring_triggers_sql("messages_fts_cjk", "fts_cjk_rebuild"),
    )


_LEGACY_TEXT = "COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || COALESCE({r}.tool_calls, '')"


def legacy_tables_sql() -> str:
    """DDL of the legacy inline layout (only used by tests and repairs; never for new files)."""
    return """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(content, tokenize='trigram');
"""


def legacy_triggers_sql() -> str:
    """The legacy layout's triggers (same names, no rebuild gating, tool rows included)."""
    parts = []
    for table in ("messages_fts", "messages_fts_trigram"):
        new_text = _LEGACY_TEXT.format(r="new")
        parts.append(
            f"""
CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages
BEGIN
    INSERT INTO {table}(rowid, content) VALUES (new.id, {new_text});
END;
CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages
BEGIN
    DELETE FROM {table} WHERE rowid = old.id;
END;
CREATE TRIGGER IF NOT EXISTS {table}_update
AFTER UPDATE OF content, tool_name, tool_calls ON messages
BEGIN
    DELETE FROM {table} WHERE rowid = old.id;
    INSERT INTO {table}(rowid, content) VALUES (new.id, {new_text});
END;
"""
        )
    return "".join(parts)


# ---------------------------------------------------------------- inspection


def _run(conn: Any, script: str) -> None:
    run_script(conn, script)


def probe_fts(conn: Any, tokenizer: str | None = None) -> bool:
    """True when FTS5 (and the given tokenizer) can be used on ``conn``."""
    tokenize = f", tokenize='{tokenizer}'" if tokenizer else ""
    try:
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp._hermes_fts5_probe USING fts5(x{tokenize})")
        conn.execute("DROP TABLE IF EXISTS temp._hermes_fts5_probe")
        return True
    except Exception as exc:
        text = str(exc).lower()
        if ("no such module" in text and "fts5" in text) or "no such tokenizer" in text:
            return False
        raise


def _objects(conn: Any, kind: str) -> dict[str, str]:
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = ?", (kind,)).fetchall()
    return {name: sql or "" for name, sql in rows}


def present_tables(conn: Any) -> list[str]:
    """The FTS tables of :data:`FTS_TABLES` that exist, in that order."""
    tables = _objects(conn, "table")
    return [t for t in FTS_TABLES if t in tables]


def fts_layout(conn: Any) -> str:
    """``"current"``, ``"legacy"`` or ``"none"`` (no ``messages_fts``), from the stored DDL."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'").fetchone()
    if row is None:
        return "none"
    return "current" if "tool_name" in (row[0] or "") else "legacy"


def get_meta(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def delete_meta(conn: Any, keys: Iterable[str]) -> None:
    keys = tuple(keys)
    conn.execute(f"DELETE FROM state_meta WHERE key IN ({', '.join('?' * len(keys))})", keys)


def drop_triggers(conn: Any, names: Iterable[str]) -> None:
    for name in names:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


def trash_tables(conn: Any) -> list[str]:
    """Shadow tables a legacy migration demoted and that still wait to be torn down."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ? ORDER BY name",
        (len(TRASH_PREFIX), TRASH_PREFIX),
    ).fetchall()
    return [r[0] for r in rows]


def index_empty_with_messages(conn: Any) -> bool:
    """True when ``messages`` has rows but the current-layout base index has none."""
    try:
        if conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() is None:
            return False
        return conn.execute("SELECT 1 FROM messages_fts_docsize LIMIT 1").fetchone() is None
    except DB_ERRORS:  # no such table (legacy or no FTS)
        return False


def cjk_tokenizer_loaded(conn: Any) -> bool:
    """True when the ``cjk_unicode61`` library is loaded into ``conn``."""
    try:
        conn.execute("SELECT fts5_cjk_version()").fetchone()
        return True
    except DB_ERRORS:
        return False


# ------------------------------------------------------------------- repairs


def _refill_legacy(conn: Any, table: str) -> None:
    # Legacy tables store their own text; refill them from messages.
    conn.execute(f"DELETE FROM {table}")
    conn.execute(f"INSERT INTO {table}(rowid, content) SELECT id, {_LEGACY_TEXT.format(r='m')} FROM messages AS m")


def rebuild_in_place(conn: Any, tables: Iterable[str] | None = None) -> int:
    """Rebuild the given (default: every present) FTS index from ``messages``; returns how many.

    Runs in the caller's transaction. A full rebuild indexes every row, so
    the matching deferred-rebuild markers are cleared with it.
    """
    legacy = fts_layout(conn) == "legacy"
    done = 0
    for table in tables if tables is not None else present_tables(conn):
        if legacy and table != "messages_fts_cjk":
            _refill_legacy(conn, table)
        else:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        delete_meta(conn, CJK_KEYS if table == "messages_fts_cjk" else BASE_KEYS)
        done += 1
    return done


def detach_fts(conn: Any) -> None:
    """Fail open: mark the indexes stale and drop every FTS trigger (writes then skip FTS).

    Searches serve a LIKE scan while ``fts_stale`` is set; the next writable
    open rebuilds and re-attaches.
    """
    triggers = _objects(conn, "trigger")
    set_meta(conn, "fts_stale", "1")
    if any(name in triggers for name in CJK_TRIGGERS):
        set_meta(conn, "fts_cjk_stale", "1")
    drop_triggers(conn, ALL_TRIGGERS)


def seed_rebuild_markers(conn: Any, prefix: str = "fts_rebuild", *, tool_free_only: bool = False) -> int:
    """Start a deferred backfill of every existing row; returns the high-water id (0 = nothing to do).

    New rows are indexed by the triggers right away; rows up to the high
    water wait for ``fts_*rebuild_step``. With ``tool_free_only`` (the
    trigram and CJK indexes skip tool rows) nothing is seeded unless a
    non-tool row exists.
    """
    keys = (f"{prefix}_high_water", f"{prefix}_progress")
    if tool_free_only and conn.execute("SELECT 1 FROM messages WHERE role <> 'tool' LIMIT 1").fetchone() is None:
        delete_meta(conn, keys)
        return 0
    high_water = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])
    if high_water <= 0:
        delete_meta(conn, keys)
        return 0
    set_meta(conn, keys[0], str(high_water))
    set_meta(conn, keys[1], "0")
    return high_water


def _narrow_update_triggers(conn: Any, legacy: bool, trigram: bool) -> None:
    # Older files have UPDATE triggers without a column list, which fire (and
    # rewrite the index) on every flag change; replace them, no rebuild needed.
    triggers = _objects(conn, "trigger")
    for name in ("messages_fts_update", "messages_fts_trigram_update"):
        sql = " ".join(triggers.get(name, "").upper().split())
        if sql and "AFTER UPDATE ON" in sql:
            conn.execute(f"DROP TRIGGER {name}")
            _run(conn, legacy_triggers_sql() if legacy else fts_triggers_sql(trigram=trigram))


_SHADOW_SUFFIXES = ("_data", "_idx", "_docsize", "_config", "_content")


def _forget_table(conn: Any, table: str) -> None:
    # Last resort for an index whose pages cannot even be freed: remove the
    # catalog rows of the table and its shadow tables. Their pages become
    # unreachable and the next VACUUM reclaims them.
    names = (table, *(f"{table}{suffix}" for suffix in _SHADOW_SUFFIXES))
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute(
            f"DELETE FROM sqlite_master WHERE type IN ('table', 'index') AND (name IN ({', '.join('?' * len(names))}) "
            f"OR tbl_name IN ({', '.join('?' * len(names))}))",
            names + names,
        )
    finally:
        conn.execute("PRAGMA writable_schema=RESET")


def _recreate_index_tables(conn: Any, trigram: bool, *, forget: bool) -> None:
    """Drop (or with ``forget``, unlink) the base and trigram indexes and create them afresh."""
    drop_triggers(conn, BASE_TRIGGERS)
    conn.execute("DROP VIEW IF EXISTS messages_fts_trigram_src")
    for table in ("messages_fts_trigram", "messages_fts"):
        if forget:
            _forget_table(conn, table)
        else:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    _run(conn, base_tables_sql(trigram=trigram))


def _recover_stale(conn: Any, trigram: bool) -> bool:
    """Re-attach indexes detached after corruption; True when the marker could be cleared.

    Tries, each in its own transaction: rebuilding in place; dropping and
    recreating the indexes; unlinking their catalog rows (a damaged b-tree
    cannot always be dropped) and recreating them.
    """
    for attempt in ("rebuild", "recreate", "forget"):
        conn.execute("BEGIN IMMEDIATE")
        try:
            drop_triggers(conn, BASE_TRIGGERS)
            if attempt != "rebuild":
                _recreate_index_tables(conn, trigram, forget=attempt == "forget")
            if fts_layout(conn) == "legacy":
                _run(conn, legacy_triggers_sql())
            else:
                _run(conn, base_tables_sql(trigram=trigram) + fts_triggers_sql(trigram=trigram))
            rebuild_in_place(conn, [t for t in present_tables(conn) if t != "messages_fts_cjk"])
            delete_meta(conn, ("fts_stale",))
            conn.execute("COMMIT")
            log.warning("FTS indexes re-attached after an earlier corruption (%s)", attempt)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure means: try the next strategy
            log.warning("FTS recovery by %s failed: %s", attempt, exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    drop_triggers(conn, ALL_TRIGGERS)
    return False


def reset_cjk_index(conn: Any) -> int:
    """Drop and recreate the CJK index, seeding a backfill of existing rows; returns the high water.

    Runs in the caller's transaction; needs the tokenizer loaded.
    """
    drop_triggers(conn, CJK_TRIGGERS)
    conn.execute("DROP TABLE IF EXISTS messages_fts_cjk")
    conn.execute("DROP VIEW IF EXISTS messages_fts_cjk_src")
    delete_meta(conn, ("fts_cjk_stale",) + CJK_KEYS)
    tables, triggers = cjk_objects_sql()
    _run(conn, tables + triggers)
    return seed_rebuild_markers(conn, "fts_cjk_rebuild", tool_free_only=True)


def _ensure_cjk(conn: Any, cjk_loaded: bool) -> bool:
    """Create, reset or detach the CJK index; returns True when it exists and is maintained."""
    triggers = _objects(conn, "trigger")
    has_triggers = any(name in triggers for name in CJK_TRIGGERS)
    if not cjk_loaded:
        if has_triggers:
            # Without the tokenizer every insert would fail with "no such tokenizer".
            drop_triggers(conn, CJK_TRIGGERS)
            set_meta(conn, "fts_cjk_stale", "1")
            log.info("CJK tokenizer not loaded: CJK index detached until it is rebuilt")
        return False
    table_exists = "messages_fts_cjk" in _objects(conn, "table")
    complete = all(name in triggers for name in CJK_TRIGGERS)
    if get_meta(conn, "fts_cjk_stale") is not None or (table_exists and not complete) or not table_exists:
        reset_cjk_index(conn)
    return True


def _fresh_storage_version(conn: Any) -> None:
    # Written once the file is on the current layout with nothing pending.
    if get_meta(conn, "fts_storage_version") is not None:
        return
    if get_meta(conn, "fts_rebuild_high_water") is not None or trash_tables(conn):
        return
    if index_empty_with_messages(conn):
        return
    set_meta(conn, "fts_storage_version", str(FTS_STORAGE_VERSION))


def ensure_fts(conn: Any, *, prior_version: int | None, cjk_loaded: bool) -> dict[str, Any]:
    """Bring the FTS objects of a writable file in order at open; returns facts about them.

    Runs outside any transaction and opens its own. Facts: ``fts`` (layout:
    ``current``/``legacy``/``none``/``stale``), ``trigram`` and ``cjk`` (bools).
    """
    if not probe_fts(conn):
        drop_triggers(conn, ALL_TRIGGERS)
        return {"fts": "none", "trigram": False, "cjk": False}
    trigram = probe_fts(conn, "trigram")
    facts: dict[str, Any] = {"trigram": trigram, "cjk": False}
    if get_meta(conn, "fts_stale") is not None and not _recover_stale(conn, trigram):
        facts["fts"] = "stale"
        return facts
    conn.execute("BEGIN IMMEDIATE")
    try:
        layout = fts_layout(conn)
        triggers = _objects(conn, "trigger")
        if layout == "legacy":
            missing = [n for n in BASE_TRIGGERS if n not in triggers]
            if missing:
                _run(conn, legacy_triggers_sql())
                rebuild_in_place(conn, [t for t in present_tables(conn) if t != "messages_fts_cjk"])
            if prior_version is not None and prior_version < 23:
                set_meta(conn, "fts_optimize_available", "1")
        else:
            wanted = BASE_TRIGGERS if trigram else BASE_TRIGGERS[:3]
            missing = [n for n in wanted if n not in triggers]
            created = layout == "none"
            _run(conn, base_tables_sql(trigram=trigram))
            if missing:
                _run(conn, fts_triggers_sql(trigram=trigram))
                if not created or conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone():
                    # Rows were written while triggers were absent: index everything again.
                    rebuild_in_place(conn, [t for t in present_tables(conn) if t != "messages_fts_cjk"])
            layout = "current"
        _narrow_update_triggers(conn, layout == "legacy", trigram)
        facts["cjk"] = _ensure_cjk(conn, cjk_loaded)
        if prior_version is not None and layout == "current":
            _fresh_storage_version(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    facts["fts"] = layout
    return facts
