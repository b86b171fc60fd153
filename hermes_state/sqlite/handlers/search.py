"""Handlers that maintain the full-text indexes: backfills, migration, repairs, optimize."""

from __future__ import annotations

import logging
from typing import Any

from ...commands.search import (
    CompactDatabase,
    DemoteLegacyFts,
    EnsureFtsTables,
    FtsRebuildStep,
    FtsTrashTeardownStep,
    OptimizeFts,
    RebuildFts,
    RepairFtsIndexes,
    RepairOptimizeBookkeeping,
    ResetStaleCjkIndex,
    SettleFtsStorage,
)
from ..schema import SCHEMA_VERSION
from ..script import run_script
from ..search.fts_schema import FTS_STORAGE_VERSION
from ..search.fts_schema import (
    BASE_KEYS,
    BASE_TRIGGERS,
    CJK_KEYS,
    DB_ERRORS,
    TRASH_PREFIX,
    base_tables_sql,
    cjk_objects_sql,
    cjk_tokenizer_loaded,
    delete_meta,
    drop_triggers,
    fts_layout,
    fts_triggers_sql,
    get_meta,
    index_empty_with_messages,
    present_tables,
    probe_fts,
    rebuild_in_place,
    reset_cjk_index,
    seed_rebuild_markers,
    set_meta,
    trash_tables,
)
from .registry import handles

log = logging.getLogger("hermes_state.sqlite.search")

# Rows around the high water re-checked when a backfill finishes, in case a
# writer with older triggers slipped rows past the gate.
BOUNDARY_SWEEP = 1000
_LEGACY_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")


def _backfill_targets(conn: Any, cjk: bool) -> list[tuple[str, bool]]:
    """(table, skips tool rows) for the backfill in question."""
    if cjk:
        return [("messages_fts_cjk", True)]
    present = present_tables(conn)
    targets = [("messages_fts", False)]
    if "messages_fts_trigram" in present:
        targets.append(("messages_fts_trigram", True))
    return targets


def _index_range(conn: Any, table: str, tool_free: bool, low: int, high: int, *, missing_only: bool) -> None:
    where = "m.id > ? AND m.id <= ?"
    if tool_free:
        where += " AND m.role <> 'tool'"
    if missing_only:
        where += f" AND NOT EXISTS (SELECT 1 FROM {table}_docsize AS d WHERE d.id = m.id)"
    conn.execute(
        f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
        f"SELECT m.id, m.content, m.tool_name, m.tool_calls FROM messages AS m WHERE {where}",
        (low, high),
    )


@handles(FtsRebuildStep)
def fts_rebuild_step(conn: Any, cmd: FtsRebuildStep) -> bool:
    keys = CJK_KEYS if cmd.cjk else BASE_KEYS
    if cmd.cjk and not cjk_tokenizer_loaded(conn):
        return False
    if not cmd.cjk and fts_layout(conn) != "current":
        return False
    high_raw, progress_raw = get_meta(conn, keys[0]), get_meta(conn, keys[1])
    if high_raw is None or progress_raw is None:
        return False
    high, progress = int(high_raw), int(progress_raw)
    targets = _backfill_targets(conn, cmd.cjk)
    if progress < high:
        upper = min(progress + max(1, cmd.chunk_rows), high)
        for table, tool_free in targets:
            _index_range(conn, table, tool_free, progress, upper, missing_only=False)
        set_meta(conn, keys[1], str(upper))
        if upper < high:
            return True
    for table, tool_free in targets:
        _index_range(conn, table, tool_free, high - BOUNDARY_SWEEP, high + BOUNDARY_SWEEP, missing_only=True)
    delete_meta(conn, keys)
    log.info("deferred %s backfill complete", "CJK index" if cmd.cjk else "FTS")
    return False


@handles(RepairOptimizeBookkeeping)
def repair_optimize_bookkeeping(conn: Any, cmd: RepairOptimizeBookkeeping) -> None:
    if get_meta(conn, BASE_KEYS[0]) is not None:
        if get_meta(conn, BASE_KEYS[1]) is None:
            # Progress lost: start the backfill over from an empty index.
            for table in ("messages_fts", "messages_fts_trigram"):
                if table in present_tables(conn) and fts_layout(conn) == "current":
                    conn.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
            set_meta(conn, BASE_KEYS[1], "0")
        return
    if fts_layout(conn) == "current" and index_empty_with_messages(conn):
        delete_meta(conn, ("fts_storage_version",))
        seed_rebuild_markers(conn)


def _legacy_shadow_tables(conn: Any) -> list[str]:
    existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [
        f"{base}{suffix}"
        for base in ("messages_fts", "messages_fts_trigram")
        for suffix in _LEGACY_SHADOW_SUFFIXES
        if f"{base}{suffix}" in existing
    ]


@handles(DemoteLegacyFts)
def demote_legacy_fts(conn: Any, cmd: DemoteLegacyFts) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        drop_triggers(conn, BASE_TRIGGERS)
        conn.execute("DROP VIEW IF EXISTS messages_fts_trigram_src")
        if fts_layout(conn) == "legacy":
            # Dropping a big FTS table rewrites every page in one transaction;
            # instead remove the catalog rows and keep the shadow tables as
            # plain "trash" tables that are torn down in small chunks later.
            conn.execute("PRAGMA writable_schema=ON")
            try:
                conn.execute(
                    "DELETE FROM sqlite_master WHERE type = 'table' "
                    "AND name IN ('messages_fts', 'messages_fts_trigram') AND sql LIKE 'CREATE VIRTUAL TABLE%'"
                )
            finally:
                conn.execute("PRAGMA writable_schema=RESET")
            for shadow in _legacy_shadow_tables(conn):
                conn.execute(f"ALTER TABLE {shadow} RENAME TO {TRASH_PREFIX}{shadow}")
        high = seed_rebuild_markers(conn)
        delete_meta(conn, ("fts_optimize_available", "fts_storage_version"))
        trigram = probe_fts(conn, "trigram")
        run_script(conn, base_tables_sql(trigram=trigram) + fts_triggers_sql(trigram=trigram))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    log.info("legacy FTS tables demoted; backfilling %d rows into the current layout", high)
    return high


@handles(EnsureFtsTables)
def ensure_fts_tables(conn: Any, cmd: EnsureFtsTables) -> None:
    if fts_layout(conn) == "legacy":
        return
    trigram = probe_fts(conn, "trigram")
    run_script(conn, base_tables_sql(trigram=trigram) + fts_triggers_sql(trigram=trigram))


@handles(ResetStaleCjkIndex)
def reset_stale_cjk_index(conn: Any, cmd: ResetStaleCjkIndex) -> bool:
    if not cjk_tokenizer_loaded(conn):
        return False
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name = 'messages_fts_cjk'")}
    if get_meta(conn, "fts_cjk_stale") is not None or not tables:
        reset_cjk_index(conn)
        return True
    # Make sure all three triggers exist (a partial set means a detached index).
    _, triggers = cjk_objects_sql()
    run_script(conn, triggers)
    return False


@handles(FtsTrashTeardownStep)
def fts_trash_teardown_step(conn: Any, cmd: FtsTrashTeardownStep) -> bool:
    trash = trash_tables(conn)
    if not trash:
        return False
    table = trash[0]
    keys = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5] > 0]
    key = ", ".join(f'"{k}"' for k in keys) if keys else "rowid"
    deleted = conn.execute(
        f'DELETE FROM "{table}" WHERE ({key}) IN (SELECT {key} FROM "{table}" LIMIT ?)', (max(1, cmd.chunk_rows),)
    ).rowcount
    if deleted == 0:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        log.info("demoted FTS table %s torn down", table)
    return True


@handles(SettleFtsStorage)
def settle_fts_storage(conn: Any, cmd: SettleFtsStorage) -> str | None:
    if get_meta(conn, BASE_KEYS[0]) is not None:
        return "backfill_incomplete"
    if trash_tables(conn):
        return "teardown_incomplete"
    if index_empty_with_messages(conn):
        return "backfill_incomplete"
    set_meta(conn, "fts_storage_version", str(FTS_STORAGE_VERSION))
    delete_meta(conn, ("fts_optimize_available",))
    conn.execute("UPDATE schema_version SET version = ? WHERE version < ?", (SCHEMA_VERSION, SCHEMA_VERSION))
    return None


@handles(CompactDatabase)
def compact_database(conn: Any, cmd: CompactDatabase) -> bool:
    try:
        conn.execute("VACUUM")
        ok = True
    except DB_ERRORS as exc:
        log.warning("VACUUM after the FTS storage migration failed: %s", exc)
        ok = False
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except DB_ERRORS as exc:
        log.debug("checkpoint after VACUUM failed: %s", exc)
    return ok


def _per_table(conn: Any, action: str) -> int:
    # One short transaction per index, so a failure on one keeps the others.
    done = 0
    for table in present_tables(conn):
        try:
            conn.execute("BEGIN IMMEDIATE")
            if action == "rebuild":
                rebuild_in_place(conn, [table])
            else:
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('{action}')")
            conn.execute("COMMIT")
            done += 1
        except DB_ERRORS as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.warning("FTS %s failed for %s: %s", action, table, exc)
    return done


@handles(OptimizeFts)
def optimize_fts(conn: Any, cmd: OptimizeFts) -> int:
    return _per_table(conn, "optimize")


@handles(RebuildFts)
def rebuild_fts(conn: Any, cmd: RebuildFts) -> int:
    return _per_table(conn, "rebuild")


@handles(RepairFtsIndexes)
def repair_fts_indexes(conn: Any, cmd: RepairFtsIndexes) -> int:
    count = rebuild_in_place(conn)
    log.warning("FTS indexes rebuilt in place after a search met corruption (%d tables)", count)
    return count
