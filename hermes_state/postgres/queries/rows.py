"""Stored rows as they are: the names and result shapes of ``sqlite.queries.rows``.

Rows come back as SQLite's ``SELECT *`` gives them: message content in its
SQLite-encoded form (``core.message_dict``), no search vector (a generated
column) and no content-kind columns.
"""

from __future__ import annotations

from typing import Any

from ...tables import CONTENT, STORE_META_KEYS, STORE_META_PREFIX, TABLE_KEYS, column_kind
from .core import MESSAGE_SELECT, message_dict
from .registry import query

__all__ = ["column_types", "user_meta_filter"]

# Stored for PostgreSQL's own reading of ``content`` (see hermes_state.postgres.content).
_CONTENT_COLUMNS = ("content_kind", "content_bytes")
_COLUMNS_SQL = (
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a "
    "WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
    "ORDER BY a.attnum"
)


async def column_types(conn: Any, table: str) -> dict[str, str]:
    """``{column: SQL type}`` of ``table`` in the current schema, generated columns left out (``{}`` if absent)."""
    rows = await conn.fetch(_COLUMNS_SQL, f'"{table}"')
    return {name: kind for name, kind in rows if not (table == "messages" and name in _CONTENT_COLUMNS)}


def user_meta_filter(table: str, column: str = "key") -> list[str]:
    """The WHERE terms that hide the store's bookkeeping rows of ``table`` (``state_meta`` only)."""
    if table != "state_meta":
        return []
    keys = ", ".join(f"'{k}'" for k in sorted(STORE_META_KEYS))
    return [f"NOT starts_with({column}, '{STORE_META_PREFIX}') AND {column} NOT IN ({keys})"]


def _keys(table: str, alias: str = "") -> str:
    return ", ".join(f'{alias}"{name}"' for name in TABLE_KEYS[table])


@query
async def table_columns(conn: Any, table: str) -> dict[str, str]:
    kinds = {name: column_kind(kind) for name, kind in (await column_types(conn, table)).items()}
    if table == "messages" and "content" in kinds:
        kinds["content"] = CONTENT
    return kinds


@query
async def dump_rows(conn: Any, table: str, after: tuple[str, ...] | None, limit: int, session_id: str | None) -> list[dict[str, Any]]:
    if await conn.fetchval("SELECT to_regclass($1)", f'"{table}"') is None:
        return []
    where = user_meta_filter(table)
    params: list[Any] = []
    if after is not None:
        marks = ", ".join(f"${len(params) + i}" for i in range(1, len(after) + 1))
        where.append(f"({_keys(table)}) > ({marks})")
        params.extend(after)
    if session_id is not None:
        params.append(session_id)
        where.append(f'"{"id" if table == "sessions" else "session_id"}" = ${len(params)}')
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    params.append(limit)
    rows = await conn.fetch(f'SELECT * FROM "{table}" {clause} ORDER BY {_keys(table)} LIMIT ${len(params)}', *params)
    return [dict(row) for row in rows]


@query
async def find_rows(conn: Any, table: str, keys: list[tuple[str, ...]]) -> list[dict[str, Any]]:
    if await conn.fetchval("SELECT to_regclass($1)", f'"{table}"') is None:
        return []
    names = TABLE_KEYS[table]
    arrays = ", ".join(f"${i}::text[]" for i in range(1, len(names) + 1))
    match = " AND ".join(f't."{name}" = k.c{i}' for i, name in enumerate(names))
    where = user_meta_filter(table, 't."key"')
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = await conn.fetch(
        f'SELECT t.* FROM "{table}" AS t JOIN unnest({arrays}) AS k({", ".join(f"c{i}" for i in range(len(names)))}) '
        f"ON {match} {clause}",
        *[list(column) for column in zip(*keys)],
    )
    found = [dict(row) for row in rows]
    return sorted(found, key=lambda row: tuple(row[name] for name in names))  # code-point order, as on SQLite


@query
async def dump_messages(conn: Any, session_id: str, after_id: int, limit: int) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"SELECT {MESSAGE_SELECT} FROM messages WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        session_id, after_id, limit,
    )
    return [message_dict(row) for row in rows]
