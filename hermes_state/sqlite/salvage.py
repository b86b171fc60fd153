"""Copy every readable row of a damaged ``state.db`` into a fresh file.

The last step of ``repair_state_db_schema``, for damage that no rebuild,
``REINDEX`` or ``VACUUM`` can fix (pages lost inside the transcript tables, a
file cut short). Tables are read in rowid order; when a page cannot be read,
the next readable rowid is found by probing further and further ahead, then
narrowing back, so one bad page costs only the rows it held. The full-text
indexes are not copied: the fresh file indexes the rows as they arrive.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from .driver import driver_module
from .search.fts_schema import DB_ERRORS

__all__ = ["salvage_rows"]

CHUNK_ROWS = 500
MAX_ROWID = 2**63 - 1
_BEFORE_FIRST = -MAX_ROWID - 1  # "nothing read yet": every rowid is above it
# Tables the fresh schema owns.
_NOT_COPIED = {"schema_version", "sqlite_sequence"}
_INDEX_PREFIX = "messages_fts"
# The index progress keys of state_meta (fts_stale, fts_rebuild_*, ...).
_INDEX_KEYS = "FROM state_meta WHERE key LIKE 'fts\\_%' ESCAPE '\\'"


def _columns(conn: Any, table: str) -> list[str]:
    """Column names of ``table``; [] when it does not exist or its definition cannot be read."""
    try:
        return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]
    except DB_ERRORS:
        return []


def _readable_from(conn: Any, table: str, start: int) -> bool:
    try:
        conn.execute(f'SELECT rowid FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT 1', (start,)).fetchall()
        return True
    except DB_ERRORS:
        return False


def _next_readable_start(conn: Any, table: str, after: int) -> int | None:
    """The smallest ``start > after`` from which a rowid-ordered read succeeds, or None."""
    step = 1
    failed = after
    while True:
        probe = min(after + step, MAX_ROWID)
        if _readable_from(conn, table, probe):
            break
        failed = probe
        if probe == MAX_ROWID:
            return None
        step *= 2
    low, high = failed, probe  # reading from low fails, from high succeeds
    while high - low > 1:
        middle = (low + high) // 2
        if _readable_from(conn, table, middle):
            high = middle
        else:
            low = middle
    return high


def _copy_table(src: Any, dest: Any, table: str, columns: list[str]) -> tuple[int, list[list[int | None]]]:
    """Copy ``table``; returns (rows copied, unreadable rowid ranges as [first, last or None])."""
    names = ", ".join(f'"{c}"' for c in columns)
    # ">= after + 1", not "> after": seeking to ``after`` itself would land on the bad page again.
    select = f'SELECT rowid, {names} FROM "{table}" WHERE rowid >= ? ORDER BY rowid LIMIT ?'
    insert = f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
    copied = 0
    lost: list[list[int | None]] = []
    after = _BEFORE_FIRST
    chunk = CHUNK_ROWS
    while True:
        try:
            rows = src.execute(select, (after + 1, chunk)).fetchall()
        except DB_ERRORS:
            if chunk > 1:
                chunk = 1  # read up to the bad page one row at a time, until past it
                continue
            start = _next_readable_start(src, table, after)
            first = None if after == _BEFORE_FIRST else after + 1
            lost.append([first, None if start is None else start - 1])
            if start is None:
                break
            after, chunk = start - 1, CHUNK_ROWS
            continue
        dest.executemany(insert, [row[1:] for row in rows])  # an INTEGER PRIMARY KEY column keeps the id
        copied += len(rows)
        if not rows or rows[-1][0] == MAX_ROWID:
            break
        after = rows[-1][0]
    return copied, lost


def _link_orphans(dest: Any) -> int:
    """Give rows whose session was lost a placeholder session; drop links to lost rows. Returns placeholders."""
    before = dest.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    dest.execute(
        "INSERT INTO sessions (id, source, started_at) "
        "SELECT session_id, 'recovered', MIN(started) FROM ("
        "  SELECT session_id, MIN(timestamp) AS started FROM messages GROUP BY session_id"
        "  UNION ALL SELECT session_id, MIN(COALESCE(first_seen, 0)) FROM session_model_usage GROUP BY session_id"
        ") WHERE session_id NOT IN (SELECT id FROM sessions) GROUP BY session_id"
    )
    dest.execute(
        "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IS NOT NULL "
        "AND parent_session_id NOT IN (SELECT id FROM sessions)"
    )
    dest.execute(
        "UPDATE sessions SET system_prompt_hash = NULL WHERE system_prompt_hash IS NOT NULL "
        "AND system_prompt_hash NOT IN (SELECT hash FROM system_prompts)"
    )
    return int(dest.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] - before)


def salvage_rows(src: Any, dest_path: Path) -> dict[str, Any]:
    """Create a fresh state database at ``dest_path`` holding every row of ``src`` that can be read.

    Returns ``{"recovered": {table: rows}, "unreadable": {table: [[first, last], ...]},
    "missing_tables": [...], "placeholder_sessions": n}``; ``first`` is None
    when the damage starts before the first row, ``last`` when it runs to the
    end of the table, and ``missing_tables`` are
    the state tables whose definition could not be read from ``src`` at all.
    Raises ``sqlite3.DatabaseError`` when neither ``sessions`` nor
    ``messages`` can be read (the caller then discards ``dest_path``). Sessions whose row was lost but whose messages survive
    get a placeholder row (``source='recovered'``); cached counters
    (``message_count``) are copied as they were.
    """
    from .schema import ensure_schema

    dest = driver_module().connect(str(dest_path), isolation_level=None)
    try:
        ensure_schema(dest)
        dest.execute("PRAGMA foreign_keys=OFF")
        # Accept a schema that could be read only in part (its last pages may be the lost ones):
        # the tables whose definitions survived can still be copied.
        src.execute("PRAGMA writable_schema=ON")
        state_tables = [
            r[0]
            for r in dest.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
            if not r[0].startswith(_INDEX_PREFIX) and r[0] not in _NOT_COPIED
        ]
        readable = {table: _columns(src, table) for table in state_tables}
        missing = [table for table, columns in readable.items() if not columns]
        if "messages" in missing and "sessions" in missing:
            raise sqlite3.DatabaseError("no transcript table of the damaged file can be read; nothing was salvaged")
        recovered: dict[str, int] = {}
        unreadable: dict[str, list[list[int | None]]] = {}
        own_index_keys = [r[0] for r in dest.execute("SELECT key " + _INDEX_KEYS).fetchall()]
        dest.execute("BEGIN IMMEDIATE")
        for table, src_columns in readable.items():
            if not src_columns:
                continue
            dest_columns = set(_columns(dest, table))
            columns = [c for c in src_columns if c in dest_columns]
            recovered[table], lost = _copy_table(src, dest, table, columns)
            if lost:
                unreadable[table] = lost
        # Index progress markers describe the old file's indexes, not this one's.
        dest.execute(
            "DELETE " + _INDEX_KEYS + f" AND key NOT IN ({', '.join('?' * len(own_index_keys))})",
            own_index_keys,
        )
        placeholders = _link_orphans(dest)
        dest.execute("COMMIT")
        return {
            "recovered": recovered,
            "unreadable": unreadable,
            "missing_tables": missing,
            "placeholder_sessions": placeholders,
        }
    finally:
        dest.close()
