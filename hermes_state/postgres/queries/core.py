"""Core read queries (sessions, messages, meta): the names and result shapes of ``sqlite.queries.core``."""

from __future__ import annotations

from typing import Any

from ...conversation import transcript_ids
from ...encoding import decode_message_row
from ..content import from_columns
from ..schema import TABLES
from .registry import query

__all__ = [
    "MESSAGE_SELECT", "conversation_rows", "get_messages", "get_meta", "get_session", "message_count", "message_dict",
    "message_storage_state",
]

# Every column a SQLite ``SELECT * FROM messages`` returns, plus the content kind columns.
_PUBLIC_MESSAGE_COLUMNS = tuple(name for name, _ in TABLES["messages"] if name not in ("content_kind", "content_bytes"))
MESSAGE_SELECT = ", ".join(f'"{c}"' for c in (*_PUBLIC_MESSAGE_COLUMNS, "content_kind", "content_bytes"))


def message_dict(record: Any) -> dict[str, Any]:
    """A raw message row as SQLite returns it (content in its SQLite-encoded form), from a record of MESSAGE_SELECT."""
    row = dict(record)
    kind = row.pop("content_kind")
    raw = row.pop("content_bytes")
    row["content"] = from_columns(kind, row["content"], raw)
    return row


_SESSION_SQL = """
SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt
FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash
WHERE s.id = $1
"""


@query
async def get_session(conn: Any, session_id: str) -> dict[str, Any] | None:
    record = await conn.fetchrow(_SESSION_SQL, session_id)
    if record is None:
        return None
    row = dict(record)
    row["system_prompt"] = row.pop("_resolved_prompt")
    return row


@query
async def get_messages(
    conn: Any,
    session_id: str,
    include_inactive: bool,
    limit: int | None,
    offset: int,
    latest: bool,
    after_id: int | None,
    before_id: int | None,
) -> list[dict[str, Any]]:
    where = ["session_id = $1"]
    params: list[Any] = [session_id]
    if not include_inactive:
        where.append("active = 1")
    if after_id is not None:
        params.append(after_id)
        where.append(f"id > ${len(params)}")
    if before_id is not None:
        params.append(before_id)
        where.append(f"id < ${len(params)}")
    sql = f"SELECT {MESSAGE_SELECT} FROM messages WHERE {' AND '.join(where)} ORDER BY id {'DESC' if latest else 'ASC'}"
    if limit is not None:
        params.append(limit)
        sql += f" LIMIT ${len(params)}"
    if offset:
        params.append(offset)
        sql += f" OFFSET ${len(params)}"
    rows = [decode_message_row(message_dict(r)) for r in await conn.fetch(sql, *params)]
    if latest:
        rows.reverse()
    return rows


# The session and its ancestors via parent links, tip first, each with its model_config (cycle-safe).
_CHAIN_SQL = """
WITH RECURSIVE chain(id, parent, config, depth, path) AS (
    SELECT id, parent_session_id, model_config, 0, ARRAY[id] FROM sessions WHERE id = $1
    UNION ALL
    SELECT s.id, s.parent_session_id, s.model_config, c.depth + 1, c.path || s.id
    FROM chain AS c JOIN sessions AS s ON s.id = c.parent
    WHERE NOT s.id = ANY(c.path) AND c.depth < $2
)
SELECT id, config FROM chain ORDER BY depth
"""


async def _parent_links(conn: Any, session_id: str, max_hops: int) -> list[tuple[str, str | None]]:
    links = [(r[0], r[1]) for r in await conn.fetch(_CHAIN_SQL, session_id, max_hops)]
    return links or [(session_id, None)]


async def session_chain(conn: Any, session_id: str, max_hops: int = 100) -> list[str]:
    """The session and its ancestors via ``parent_session_id``, root first (cycle-safe)."""
    return [link[0] for link in reversed(await _parent_links(conn, session_id, max_hops))]


async def transcript_chain(conn: Any, session_id: str, max_hops: int = 100) -> list[str]:
    """The sessions whose rows make up ``session_id``'s transcript, root first (see ``conversation.transcript_ids``)."""
    return transcript_ids(await _parent_links(conn, session_id, max_hops))


@query
async def conversation_rows(
    conn: Any, session_id: str, include_ancestors: bool, include_inactive: bool
) -> list[dict[str, Any]]:
    """Raw message rows of the session (and its transcript's ancestors), root to tip, by id."""
    ids = await transcript_chain(conn, session_id) if include_ancestors else [session_id]
    active = "" if include_inactive else " AND active = 1"
    records = await conn.fetch(
        f"SELECT {MESSAGE_SELECT} FROM messages WHERE session_id = ANY($1::text[]){active} ORDER BY id", ids
    )
    return [message_dict(r) for r in records]


@query
async def message_count(conn: Any, session_id: str | None) -> int:
    if session_id:
        return int(await conn.fetchval("SELECT COUNT(*) FROM messages WHERE session_id = $1", session_id))
    return int(await conn.fetchval("SELECT COUNT(*) FROM messages"))


@query
async def message_storage_state(conn: Any, message_id: int) -> dict[str, Any] | None:
    record = await conn.fetchrow("SELECT session_id, active, compacted FROM messages WHERE id = $1", message_id)
    return None if record is None else dict(record)


@query
async def get_meta(conn: Any, key: str) -> str | None:
    return await conn.fetchval("SELECT value FROM state_meta WHERE key = $1", key)
