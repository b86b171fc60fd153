"""SQL helpers shared by several PostgreSQL handlers: prompts, guards, message inserts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ...commands.messages import MessageRow
from ...commands.leases import TurnFence
from ...errors import SessionNotFoundError, SessionTurnLeaseLostError
from ...rules import append_refusal, fence_holds, fence_renewal_due
from ..clock import DB_NOW
from ..content import to_columns

__all__ = [
    "MESSAGE_COLUMNS",
    "transcript_verdict",
    "require_fence",
    "compact_json",
    "gc_prompts",
    "insert_messages",
    "require_session",
    "row_count",
    "store_prompt",
]

GC_PROMPTS_SQL = (
    "DELETE FROM system_prompts WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions WHERE sessions.system_prompt_hash = system_prompts.hash)"
)

# Insert columns and their array types for ``unnest``; the order of message_values().
MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session_id", "text"), ("role", "text"), ("content", "text"), ("tool_call_id", "text"),
    ("tool_calls", "text"), ("tool_name", "text"), ("effect_disposition", "text"), ("timestamp", "float8"),
    ("token_count", "int8"), ("finish_reason", "text"), ("reasoning", "text"), ("reasoning_content", "text"),
    ("reasoning_details", "text"), ("codex_reasoning_items", "text"), ("codex_message_items", "text"),
    ("platform_message_id", "text"), ("observed", "int4"), ("api_content", "text"), ("display_kind", "text"),
    ("display_metadata", "text"), ("content_kind", "int2"), ("content_bytes", "bytea"),
)
_NAMES = ", ".join(f'"{name}"' for name, _ in MESSAGE_COLUMNS)
_ARRAYS = ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(MESSAGE_COLUMNS, 1))
_N = len(MESSAGE_COLUMNS)

# One statement per run: insert every row (ids drawn in input order), bump the counters.
INSERT_MESSAGES_SQL = f"""
WITH ins AS (
    INSERT INTO messages ({_NAMES}) SELECT * FROM unnest({_ARRAYS}) RETURNING id
), bump AS (
    UPDATE sessions AS s SET message_count = COALESCE(s.message_count, 0) + c.added,
        tool_call_count = COALESCE(s.tool_call_count, 0) + c.calls
    FROM unnest(${_N + 1}::text[], ${_N + 2}::int8[], ${_N + 3}::int8[]) AS c(id, added, calls)
    WHERE s.id = c.id
)
SELECT id FROM ins ORDER BY id
"""


def compact_json(value: Any) -> str:
    """JSON text the way SQLite's json functions write it (no spaces)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def row_count(status: str) -> int:
    """Rows an INSERT/UPDATE/DELETE touched, from asyncpg's command status (``"UPDATE 3"``)."""
    return int(status.rsplit(" ", 1)[-1])


async def gc_prompts(conn: Any) -> None:
    """Drop prompt rows no session points at any more."""
    await conn.execute(GC_PROMPTS_SQL)


async def store_prompt(conn: Any, prompt: str | None, digest: str | None) -> None:
    """Insert the de-duplicated prompt row unless it exists."""
    if prompt is not None and digest is not None:
        await conn.execute(
            "INSERT INTO system_prompts (hash, prompt) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING", digest, prompt
        )


async def require_session(conn: Any, session_id: str, what: str = "session") -> None:
    """Raise :class:`SessionNotFoundError` (SQLite's class and wording) when the session is missing."""
    if await conn.fetchval("SELECT 1 FROM sessions WHERE id = $1", session_id) is None:
        raise SessionNotFoundError(session_id, what=what)


_VERDICT_SQL = f"""
SELECT s.id IS NOT NULL, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END, COALESCE(s.conversation_id, $1),
    l.holder, l.token, l.expires_at, {DB_NOW}
FROM (SELECT 1) AS one LEFT JOIN sessions AS s ON s.id = $1
LEFT JOIN session_turn_leases AS l ON l.conversation_id = COALESCE(s.conversation_id, $1)
"""


async def transcript_verdict(conn: Any, session_id: str, fence: TurnFence | None) -> BaseException | None:
    """The admission verdict of one transcript write (``rules.append_refusal``), in one query.

    An admitted fence whose lease expired without a takeover renews it (the
    writer holds the lease row locked, see ``writer``).
    """
    exists, closed_by, conversation, holder, token, expires_at, now = await conn.fetchrow(_VERDICT_SQL, session_id)
    fence_ok = fence_holds(fence, holder, token)
    if fence is not None and fence_ok and fence_renewal_due(fence, expires_at, now):
        await conn.execute(
            f"UPDATE session_turn_leases SET expires_at = {DB_NOW} + $2 WHERE conversation_id = $1",
            conversation, fence.ttl_seconds,
        )
    return append_refusal(session_id, exists, closed_by, fence_ok)


async def require_fence(conn: Any, session_id: str, fence: TurnFence | None) -> None:
    """Raise :class:`SessionTurnLeaseLostError` unless ``fence`` (if any) still holds the session's conversation."""
    if fence is None:
        return
    refusal = await transcript_verdict(conn, session_id, fence)
    if isinstance(refusal, SessionTurnLeaseLostError):
        raise refusal


def message_values(session_id: str, row: MessageRow) -> tuple[Any, ...]:
    """One row's values in :data:`MESSAGE_COLUMNS` order."""
    kind, text, raw = to_columns(row.content)
    return (
        session_id, row.role, text, row.tool_call_id, row.tool_calls, row.tool_name, row.effect_disposition,
        row.timestamp, row.token_count, row.finish_reason, row.reasoning, row.reasoning_content,
        row.reasoning_details, row.codex_reasoning_items, row.codex_message_items, row.platform_message_id,
        row.observed, row.api_content, row.display_kind, row.display_metadata, kind, raw,
    )


async def insert_messages(conn: Any, rows: Iterable[tuple[str, MessageRow]], *, count: bool = True) -> list[int]:
    """Insert ``(session_id, row)`` pairs in order, in one round trip; returns the new ids in that order.

    With ``count`` the sessions' ``message_count``/``tool_call_count`` grow by
    the rows added. Ids come from the identity sequence while the batch holds
    the session locks, so within a session they follow insert (and commit) order.
    """
    pairs = list(rows)
    if not pairs:
        return []
    columns = [list(col) for col in zip(*(message_values(sid, row) for sid, row in pairs))]
    tallies: dict[str, list[int]] = {}
    if count:
        for sid, row in pairs:
            tally = tallies.setdefault(sid, [0, 0])
            tally[0] += 1
            tally[1] += row.tool_call_count
    ids = list(tallies)
    result = await conn.fetch(
        INSERT_MESSAGES_SQL, *columns, ids, [tallies[i][0] for i in ids], [tallies[i][1] for i in ids]
    )
    return [r[0] for r in result]
