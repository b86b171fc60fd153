"""Handlers for session turn leases (see ``commands.leases``).

Every statement runs inside the writer's ``BEGIN IMMEDIATE``, which holds
the file's write lock: the lease row read, the takeover decision and the
insert happen with no other writer in between, in any process. The clock is
read here, inside that transaction, so a write that waited for the lock
never stores a lease that is already old.

Fencing tokens come from ``state_meta`` (``turn_lease_token``), one counter
for the file: every acquisition takes the next value, so a token is never
handed out twice, also after its lease row is released or swept.
"""

from __future__ import annotations

import time
from typing import Any

from ...commands.leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease
from ...rules import turn_lease_takeover
from .registry import handles

__all__ = ["TOKEN_KEY", "SWEEP_GRACE_SECONDS", "conversation_key"]

TOKEN_KEY = "turn_lease_token"
# An expired lease can still be renewed by its holder until somebody takes it over; rows
# expired for longer than this are swept by the next acquire of any conversation.
SWEEP_GRACE_SECONDS = 3600.0
_SWEEP_BATCH = 32


def conversation_key(conn: Any, session_id: str) -> str:
    """The conversation id of ``session_id``; an id with no session row keys itself."""
    row = conn.execute("SELECT conversation_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row[0] if row is not None and row[0] is not None else session_id


def _next_token(conn: Any) -> int:
    # Two statements rather than RETURNING, which SQLite before 3.35 lacks.
    conn.execute(
        "INSERT INTO state_meta (key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
        (TOKEN_KEY,),
    )
    return int(conn.execute("SELECT value FROM state_meta WHERE key = ?", (TOKEN_KEY,)).fetchone()[0])


@handles(AcquireTurnLease)
def acquire_turn_lease(conn: Any, cmd: AcquireTurnLease) -> tuple[bool, int | None, str, bool]:
    now = time.time()
    key = conversation_key(conn, cmd.session_id)
    row = conn.execute(
        "SELECT holder, token, expires_at, holder_host, holder_pid, holder_started "
        "FROM session_turn_leases WHERE conversation_id = ?",
        (key,),
    ).fetchone()
    if row is not None:
        verdict = turn_lease_takeover(cmd.holder, cmd.exclusive, row[0], float(row[2]), row[3], row[4], row[5], now)
        if verdict == "held":
            return True, row[1], key, False
        if verdict == "busy":
            return False, None, key, False
        conn.execute("DELETE FROM session_turn_leases WHERE conversation_id = ?", (key,))
    token = _next_token(conn)
    conn.execute(
        "INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at, token, "
        "holder_host, holder_pid, holder_started) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (key, cmd.holder, now, now + cmd.ttl_seconds, token, cmd.host, cmd.pid, cmd.started),
    )
    conn.execute(
        "DELETE FROM session_turn_leases WHERE conversation_id IN (SELECT conversation_id FROM session_turn_leases "
        "WHERE expires_at < ? ORDER BY expires_at LIMIT ?)",
        (now - SWEEP_GRACE_SECONDS, _SWEEP_BATCH),
    )
    return True, token, key, True


def _owner_clause(token: int | None) -> str:
    return " AND token = ?" if token is not None else ""


@handles(RefreshTurnLease)
def refresh_turn_lease(conn: Any, cmd: RefreshTurnLease) -> bool:
    key = conversation_key(conn, cmd.session_id)
    params: list[Any] = [time.time() + cmd.ttl_seconds, key, cmd.holder]
    if cmd.token is not None:
        params.append(cmd.token)
    cur = conn.execute(
        "UPDATE session_turn_leases SET expires_at = ? WHERE conversation_id = ? AND holder = ?"
        + _owner_clause(cmd.token),
        params,
    )
    return cur.rowcount > 0


@handles(ReleaseTurnLease)
def release_turn_lease(conn: Any, cmd: ReleaseTurnLease) -> tuple[bool, str]:
    key = conversation_key(conn, cmd.session_id)
    params: list[Any] = [key, cmd.holder]
    if cmd.token is not None:
        params.append(cmd.token)
    cur = conn.execute(
        "DELETE FROM session_turn_leases WHERE conversation_id = ? AND holder = ?" + _owner_clause(cmd.token), params
    )
    return cur.rowcount > 0, key
