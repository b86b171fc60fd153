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


_AHEAD_SQL = (
    "SELECT expires_at, holder_host, holder_pid, holder_started FROM session_turn_waiters "
    "WHERE conversation_id = $1 AND ticket < $2 ORDER BY ticket LIMIT $3"
)
AHEAD_LIMIT = 16


@query
async def turn_lease_state(conn: Any, session_id: str, ticket: int | None = None) -> dict[str, Any]:
    """The conversation id of ``session_id``, its lease row (holder None when free), the database clock's ``now``
    and ``ahead``, the waiters queued before ``ticket`` (see the SQLite query)."""
    state = dict(await conn.fetchrow(_STATE_SQL, session_id))
    bound = ticket if ticket is not None else 1 << 62
    state["ahead"] = [tuple(r) for r in await conn.fetch(_AHEAD_SQL, state["conversation_id"], bound, AHEAD_LIMIT)]
    return state


@query
async def turn_leases(conn: Any) -> list[dict[str, Any]]:
    """Every turn-lease row (live and expired), oldest acquisition first, with ``live`` by the database clock."""
    rows = await conn.fetch(
        "SELECT conversation_id, holder, token, acquired_at, expires_at, holder_host, holder_pid, "
        f"expires_at > {DB_NOW} AS live FROM session_turn_leases ORDER BY acquired_at, conversation_id"
    )
    return [dict(r) for r in rows]
