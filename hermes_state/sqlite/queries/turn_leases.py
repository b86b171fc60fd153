"""Read queries for session turn leases."""

from __future__ import annotations

import time
from typing import Any

from .registry import query

__all__ = ["turn_lease_state"]

_STATE_SQL = (
    "SELECT k.key, l.holder, l.token, l.expires_at, l.holder_host, l.holder_pid, l.holder_started "
    "FROM (SELECT COALESCE((SELECT conversation_id FROM sessions WHERE id = ?1), ?1) AS key) AS k "
    "LEFT JOIN session_turn_leases AS l ON l.conversation_id = k.key"
)


_AHEAD_SQL = (
    "SELECT expires_at, holder_host, holder_pid, holder_started FROM session_turn_waiters "
    "WHERE conversation_id = ? AND ticket < ? ORDER BY ticket LIMIT ?"
)
# How many waiters ahead a look reads: enough to find a live one past a few dead ones.
AHEAD_LIMIT = 16


@query
def turn_lease_state(conn: Any, session_id: str, ticket: int | None = None) -> dict[str, Any]:
    """The conversation id of ``session_id``, its lease row (holder None when free), the clock's ``now``,
    and ``ahead``: ``(expires_at, host, pid, started)`` of the first waiters queued before ``ticket`` (before
    anyone new, for None)."""
    row = conn.execute(_STATE_SQL, (session_id,)).fetchone()
    names = ("conversation_id", "holder", "token", "expires_at", "holder_host", "holder_pid", "holder_started")
    state = dict(zip(names, row))
    state["now"] = time.time()
    bound = ticket if ticket is not None else 1 << 62
    state["ahead"] = conn.execute(_AHEAD_SQL, (state["conversation_id"], bound, AHEAD_LIMIT)).fetchall()
    return state


@query
def turn_leases(conn: Any) -> list[dict[str, Any]]:
    """Every turn-lease row (live and expired), oldest acquisition first, with ``live`` by the clock now."""
    now = time.time()
    names = ("conversation_id", "holder", "token", "acquired_at", "expires_at", "holder_host", "holder_pid")
    rows = conn.execute(
        f"SELECT {', '.join(names)} FROM session_turn_leases ORDER BY acquired_at, conversation_id"
    ).fetchall()
    return [{**dict(zip(names, row)), "live": row[4] > now} for row in rows]
