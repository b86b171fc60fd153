"""Stored rows as they are (``SessionDB.dump_rows`` and friends): every column, in primary-key order.

``find_rows`` sorts by key in code-point order (Python's, and SQLite's BINARY
collation of UTF-8), the same on both backends.

Table names come from :mod:`hermes_state.tables` (the facade checks them);
a table an old file lacks reads as empty.
"""

from __future__ import annotations

from typing import Any

from ...tables import CONTENT, STORE_META_KEYS, STORE_META_PREFIX, TABLE_KEYS, column_kind
from .core import fetch_dicts
from .registry import query

__all__ = ["key_match", "meta_filter", "table_kinds"]

# state_meta rows that are not the store's own bookkeeping (see tables.is_store_meta).
_USER_META = (
    f"NOT (key >= '{STORE_META_PREFIX}' AND key < '{STORE_META_PREFIX[:-1]}`') "
    f"AND key NOT IN ({', '.join(repr(k) for k in sorted(STORE_META_KEYS))})"
)


def table_kinds(conn: Any, table: str) -> dict[str, str]:
    """``{column: kind}`` of ``table`` in table order (``{}`` when the file has no such table)."""
    kinds = {row[1]: column_kind(row[2] or "") for row in conn.execute(f'PRAGMA table_info("{table}")')}
    if table == "messages" and "content" in kinds:
        kinds["content"] = CONTENT  # text or bytes
    return kinds


def meta_filter(table: str) -> list[str]:
    """The WHERE terms that hide the store's bookkeeping rows of ``table``."""
    return [_USER_META] if table == "state_meta" else []


def key_match(table: str) -> str:
    """``(k1, k2, ...)`` for a row-value comparison on ``table``'s primary key."""
    return "(" + ", ".join(f'"{name}"' for name in TABLE_KEYS[table]) + ")"


def _order(table: str) -> str:
    return ", ".join(f'"{name}"' for name in TABLE_KEYS[table])


@query
def table_columns(conn: Any, table: str) -> dict[str, str]:
    return table_kinds(conn, table)


@query
def dump_rows(conn: Any, table: str, after: tuple[str, ...] | None, limit: int, session_id: str | None) -> list[dict[str, Any]]:
    if not table_kinds(conn, table):
        return []
    where = meta_filter(table)
    params: list[Any] = []
    if after is not None:
        where.append(f"{key_match(table)} > ({', '.join('?' * len(after))})")
        params.extend(after)
    if session_id is not None:
        where.append('"id" = ?' if table == "sessions" else '"session_id" = ?')
        params.append(session_id)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return fetch_dicts(conn, f'SELECT * FROM "{table}" {clause} ORDER BY {_order(table)} LIMIT ?', [*params, limit])


# Keys per statement: well inside SQLite's bound-variable limit for the widest key (6 columns).
_KEYS_PER_STATEMENT = 150


@query
def find_rows(conn: Any, table: str, keys: list[tuple[str, ...]]) -> list[dict[str, Any]]:
    if not table_kinds(conn, table):
        return []
    width = len(TABLE_KEYS[table])
    one = "(" + ", ".join("?" * width) + ")"
    rows: list[dict[str, Any]] = []
    for start in range(0, len(keys), _KEYS_PER_STATEMENT):
        chunk = keys[start : start + _KEYS_PER_STATEMENT]
        where = [f"{key_match(table)} IN (VALUES {', '.join([one] * len(chunk))})", *meta_filter(table)]
        params = [part for key in chunk for part in key]
        rows += fetch_dicts(conn, f'SELECT * FROM "{table}" WHERE {" AND ".join(where)}', params)
    names = TABLE_KEYS[table]
    return sorted(rows, key=lambda row: tuple(row[name] for name in names))


@query
def dump_messages(conn: Any, session_id: str, after_id: int, limit: int) -> list[dict[str, Any]]:
    return fetch_dicts(
        conn, "SELECT * FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?", (session_id, after_id, limit)
    )
