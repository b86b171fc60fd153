"""Read queries for session turn leases (the names and shapes of ``sqlite.queries.turn_leases``)."""

from __future__ import annotations

from typing import Any

from ..clock import DB_NOW
from .registry import query

__all__ = ["turn_lease_state"]

_STATE_SQL = f"""
SELECT k.key AS conversation_id, l.holder, l.token, l.expires_at, l.holder_host, l.holder_pid, l.holder_started,
    {DB_NOW} AS now
FROM (SELECT COALESCE((SELECT conversation_id FROM sessions WHERE id = $1), $1) AS key) AS k
LEFT JOIN session_turn_leases AS l ON l.conversation_id = k.key
"""


@query
async def turn_lease_state(conn: Any, session_id: str) -> dict[str, Any]:
    """The conversation id of ``session_id`` and its lease row (holder None when free), with the database clock's ``now``."""
    return dict(await conn.fetchrow(_STATE_SQL, session_id))


@query
async def turn_leases(conn: Any) -> list[dict[str, Any]]:
    """Every turn-lease row (live and expired), oldest acquisition first, with ``live`` by the database clock."""
    rows = await conn.fetch(
        "SELECT conversation_id, holder, token, acquired_at, expires_at, holder_host, holder_pid, "
        f"expires_at > {DB_NOW} AS live FROM session_turn_leases ORDER BY acquired_at, conversation_id"
    )
    return [dict(r) for r in rows]
