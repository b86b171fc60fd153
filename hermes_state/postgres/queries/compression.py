"""Read queries for compression leases, lineage walks, resume and the compressor's counters.

The names, arguments and result shapes of ``sqlite.queries.compression``.
Which parent links form a compression lineage is said once, by the SQL
fragments of ``lineage_sql``; the write handlers (compression, titles) use
them too, so reads and writes agree on what a continuation is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ...errors import SessionResumeTooLargeError
from ...limits import INT64_MAX
from .core import MESSAGE_SELECT, message_dict, session_chain, transcript_chain
from ..lineage_sql import compression_tip, continuation_sql
from ..clock import DB_NOW
from .registry import query

__all__ = ["session_rows"]

# Hop limit of a resume walk (malformed data must not loop forever).
RESUME_MAX_HOPS = 32


async def session_rows(conn: Any, where: str, params: tuple[Any, ...], tail: str = "") -> list[dict[str, Any]]:
    """Session rows in ``get_session`` shape (prompt resolved) matching ``where`` on alias ``s``."""
    records = await conn.fetch(
        "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt "
        f"FROM sessions AS s LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash WHERE {where} {tail}",
        *params,
    )
    rows = []
    for record in records:
        row = dict(record)
        row["system_prompt"] = row.pop("_resolved_prompt")
        rows.append(row)
    return rows


async def _walk(conn: Any, step_sql: str, start: str, hops: int) -> AsyncIterator[str]:
    """Yield ``start``, then each id ``step_sql`` picks next; stops on none, a repeat, or after ``hops`` steps."""
    current, seen = start, {start}
    yield current
    for _ in range(hops):
        found = await conn.fetchval(step_sql, current)
        if found is None or found in seen:
            return
        current = found
        seen.add(current)
        yield current


@query
async def compression_tip_id(conn: Any, session_id: str) -> str:
    return await compression_tip(conn, session_id)


# A parent ended by a session switch whose child keeps its session_key was
# reset into that child (a new conversation on the same chat), not continued.
_PLAIN_CHILD_SQL = f"""
SELECT c.id FROM sessions AS c JOIN sessions AS p ON p.id = c.parent_session_id
WHERE c.parent_session_id = $1 AND {continuation_sql('c')}
  AND NOT (COALESCE(p.end_reason, '') = 'session_switch' AND c.session_key IS NOT NULL
           AND c.session_key = p.session_key)
ORDER BY c.started_at DESC, c.id DESC LIMIT 1
"""


@query
async def resume_target_id(conn: Any, session_id: str) -> str:
    """The compression tip, then the deepest plain descendant that holds messages."""
    tip = await compression_tip(conn, session_id)
    best = tip
    async for current in _walk(conn, _PLAIN_CHILD_SQL, tip, RESUME_MAX_HOPS - 1):
        if await conn.fetchval("SELECT 1 FROM messages WHERE session_id = $1 LIMIT 1", current) is not None:
            best = current
    return best


_LINEAGE_ROW_SQL = (
    f"SELECT s.id, s.parent_session_id, s.end_reason, {continuation_sql('s')} AS continues, "
    "(SELECT p.end_reason FROM sessions AS p WHERE p.id = s.parent_session_id) AS parent_end_reason "
    "FROM sessions AS s WHERE s.id = $1"
)
_FIRST_CONTINUATION_SQL = (
    f"SELECT c.id, c.end_reason FROM sessions AS c WHERE c.parent_session_id = $1 AND {continuation_sql('c')} "
    "ORDER BY c.started_at ASC, c.id ASC LIMIT 1"
)


@query
async def compression_lineage_ids(conn: Any, session_id: str) -> list[str]:
    """Root-to-tip ids of the session's compression lineage (``[]`` unknown, ``[id]`` for a fork)."""
    row = await conn.fetchrow(_LINEAGE_ROW_SQL, session_id)
    if row is None:
        return []
    if not row[3]:
        return [session_id]
    root, seen = row, {session_id}
    while root[1] is not None and root[4] == "compression" and root[3] and root[1] not in seen:
        parent = await conn.fetchrow(_LINEAGE_ROW_SQL, root[1])
        if parent is None:
            break
        root = parent
        seen.add(root[0])
    lineage = [root[0]]
    current_id, current_reason = root[0], root[2]
    while current_reason == "compression":
        child = await conn.fetchrow(_FIRST_CONTINUATION_SQL, current_id)
        if child is None or child[0] in lineage:
            break
        lineage.append(child[0])
        current_id, current_reason = child[0], child[1]
    return lineage if session_id in lineage else [session_id]


@query
async def conversation_root_id(conn: Any, session_id: str) -> str:
    return (await session_chain(conn, session_id))[0]


async def _active_count(conn: Any, ids: list[str], bound: int | None) -> int:
    inner = "SELECT 1 FROM messages WHERE session_id = ANY($1::text[]) AND active = 1"
    if bound is None:
        return int(await conn.fetchval(f"SELECT COUNT(*) FROM ({inner}) AS rows", ids))
    over = min(bound, INT64_MAX - 1) + 1  # one past the bound, still a 64-bit int
    return int(await conn.fetchval(f"SELECT COUNT(*) FROM ({inner} LIMIT $2) AS rows", ids, over))


async def _check_resume_size(conn: Any, session_id: str, ids: list[str], limit: int) -> int:
    """Bounded count of the lineage's active rows; raises when it exceeds ``limit`` (0: no limit)."""
    if limit <= 0:
        return 0
    count = await _active_count(conn, ids, limit)
    if count > limit:
        raise SessionResumeTooLargeError(session_id, count, limit)
    return count


@query
async def resume_message_count(conn: Any, session_id: str) -> int:
    """Active rows a full resume would load: those of the session's transcript chain (``resume_rows``)."""
    return await _active_count(conn, await transcript_chain(conn, session_id), None)


@query
async def resume_size_check(conn: Any, session_id: str, limit: int) -> int:
    return await _check_resume_size(conn, session_id, await transcript_chain(conn, session_id), limit)


@query
async def resume_rows(conn: Any, session_id: str, limit: int) -> list[dict[str, Any]]:
    """Active message rows of the session's transcript chain, root first, after the size guard."""
    ids = await transcript_chain(conn, session_id)
    await _check_resume_size(conn, session_id, ids, limit)
    records = await conn.fetch(
        f"SELECT {MESSAGE_SELECT} FROM messages WHERE session_id = ANY($1::text[]) AND active = 1 ORDER BY id", ids
    )
    return [message_dict(r) for r in records]


@query
async def live_compression_child(conn: Any, parent_session_id: str) -> dict[str, Any] | None:
    parent = await conn.fetchval(
        "SELECT 1 FROM sessions WHERE id = $1 AND ended_at IS NOT NULL AND end_reason = 'compression'",
        parent_session_id,
    )
    if parent is None:
        return None
    rows = await session_rows(
        conn,
        f"s.parent_session_id = $1 AND s.ended_at IS NULL AND {continuation_sql('s')}",
        (parent_session_id,),
        "ORDER BY s.started_at ASC, s.id ASC LIMIT 2",
    )
    return rows[0] if len(rows) == 1 else None


@query
async def compression_lock_holder(conn: Any, session_id: str, now: float) -> str | None:
    """The live holder by the database clock (``now``, the caller's clock, is SQLite's and unused here)."""
    return await conn.fetchval(
        f"SELECT holder FROM compression_locks WHERE session_id = $1 AND expires_at >= {DB_NOW}", session_id
    )


@query
async def compression_cooldown_row(conn: Any, session_id: str) -> dict[str, Any]:
    row = await conn.fetchrow(
        "SELECT compression_failure_cooldown_until, compression_failure_error FROM sessions WHERE id = $1",
        session_id,
    )
    if row is None:
        return {"session_exists": False, "cooldown_until": None, "error": None}
    return {"session_exists": True, "cooldown_until": None if row[0] is None else float(row[0]), "error": row[1]}


_COUNTERS = ("compression_fallback_streak", "compression_ineffective_count")


@query
async def compression_counter(conn: Any, session_id: str, column: str) -> int:
    if column not in _COUNTERS:
        raise ValueError(f"unknown compression counter: {column!r}")
    value = await conn.fetchval(f"SELECT {column} FROM sessions WHERE id = $1", session_id)
    return max(0, int(value or 0))


@query
async def active_message_watermark(conn: Any, session_id: str) -> int:
    """The id of the session's newest active message, 0 when it has none."""
    return int(
        await conn.fetchval("SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = $1 AND active = 1", session_id)
    )
# Columns of a child row: enough to link it and to say how it relates to its parent.
CHILD_COLUMNS = "c.id, c.source, c.title, c.model, c.model_config, c.session_key, c.started_at, c.ended_at, c.end_reason, c.message_count"


@query
async def child_session_rows(conn: Any, session_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """``(parent, children)``: the parent's ``end_reason``/``ended_at``/``session_key`` and its direct children, oldest first."""
    parent = await conn.fetchrow("SELECT end_reason, ended_at, session_key FROM sessions WHERE id = $1", session_id)
    if parent is None:
        return None, []
    children = await conn.fetch(
        f"SELECT {CHILD_COLUMNS} FROM sessions AS c WHERE c.parent_session_id = $1 ORDER BY c.started_at, c.id",
        session_id,
    )
    return dict(parent), [dict(record) for record in children]
