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


@query
def turn_lease_state(conn: Any, session_id: str) -> dict[str, Any]:
    """The conversation id of ``session_id`` and its lease row (holder None when free), with the clock's ``now``."""
    row = conn.execute(_STATE_SQL, (session_id,)).fetchone()
    names = ("conversation_id", "holder", "token", "expires_at", "holder_host", "holder_pid", "holder_started")
    state = dict(zip(names, row))
    state["now"] = time.time()
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
