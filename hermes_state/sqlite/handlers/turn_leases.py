"""Handlers for session turn leases (see ``commands.leases``).

Every statement runs inside the writer's ``BEGIN IMMEDIATE``, which holds
the file's write lock: the lease row read, the takeover decision and the
insert happen with no other writer in between, in any process. The clock is
read here, inside that transaction, so a write that waited for the lock
never stores a lease that is already old.

Waiters queue in ``session_turn_waiters``: a free lease goes to the live
waiter with the lowest ticket (expired waiters, and those whose process on
this host is gone, are dropped when met), so turns are handed out in the
order their callers began waiting, across processes.

Fencing tokens (and waiter tickets) come from ``state_meta`` (``turn_lease_token``), one counter
for the file: every acquisition takes the next value, so a token is never
handed out twice, also after its lease row is released or swept.
"""

from __future__ import annotations

import time
from typing import Any

from ...commands.leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease, WithdrawTurnTicket
from ...rules import turn_lease_takeover, turn_waiter_alive
from .registry import handles

__all__ = ["TOKEN_KEY", "SWEEP_GRACE_SECONDS", "conversation_key"]

TOKEN_KEY = "turn_lease_token"
# An expired lease can still be renewed by its holder until somebody takes it over; rows
# expired for longer than this are swept by the next acquire of any conversation.
SWEEP_GRACE_SECONDS = 3600.0
_SWEEP_BATCH = 32
# Waiter rows expired this long (their process stalled or died without leaving the queue) are swept.
WAITER_GRACE_SECONDS = 60.0


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


def _first_in_queue(conn: Any, key: str, ticket: int | None, now: float) -> bool:
    """Whether no live waiter of ``key`` is ahead of ``ticket`` (of anyone, for None); drops dead waiters met."""
    bound = ticket if ticket is not None else 1 << 62
    rows = conn.execute(
        "SELECT ticket, expires_at, holder_host, holder_pid, holder_started FROM session_turn_waiters "
        "WHERE conversation_id = ? AND ticket < ? ORDER BY ticket",
        (key, bound),
    ).fetchall()
    for ahead, expires_at, host, pid, started in rows:
        if turn_waiter_alive(float(expires_at), host, pid, started, now):
            return False
        conn.execute("DELETE FROM session_turn_waiters WHERE ticket = ?", (ahead,))
    return True


def _queue(conn: Any, cmd: AcquireTurnLease, key: str, now: float) -> int | None:
    """Keep the caller's ticket fresh, or draw one when it has none (or lost it); None unless ``cmd.queue``."""
    if not cmd.queue:
        return None
    expires = now + cmd.queue_ttl_seconds
    if cmd.ticket is not None:
        kept = conn.execute(
            "UPDATE session_turn_waiters SET expires_at = ? WHERE ticket = ? AND conversation_id = ?",
            (expires, cmd.ticket, key),
        )
        if kept.rowcount > 0:
            return cmd.ticket
    ticket = _next_token(conn)
    conn.execute(
        "INSERT INTO session_turn_waiters (ticket, conversation_id, holder, expires_at, holder_host, holder_pid, "
        "holder_started) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (ticket, key, cmd.holder, expires, cmd.host, cmd.pid, cmd.started),
    )
    return ticket


@handles(AcquireTurnLease)
def acquire_turn_lease(conn: Any, cmd: AcquireTurnLease) -> tuple[bool, int | None, str, bool, int | None]:
    now = time.time()
    key = conversation_key(conn, cmd.session_id)
    row = conn.execute(
        "SELECT holder, token, expires_at, holder_host, holder_pid, holder_started "
        "FROM session_turn_leases WHERE conversation_id = ?",
        (key,),
    ).fetchone()
    verdict = "take"
    if row is not None:
        verdict = turn_lease_takeover(cmd.holder, cmd.exclusive, row[0], float(row[2]), row[3], row[4], row[5], now)
        if verdict == "held":
            _drop_ticket(conn, cmd.ticket)
            return True, row[1], key, False, None
    if verdict == "busy" or not _first_in_queue(conn, key, cmd.ticket, now):
        return False, None, key, False, _queue(conn, cmd, key, now)
    if row is not None:
        conn.execute("DELETE FROM session_turn_leases WHERE conversation_id = ?", (key,))
    _drop_ticket(conn, cmd.ticket)
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
    conn.execute(
        "DELETE FROM session_turn_waiters WHERE ticket IN (SELECT ticket FROM session_turn_waiters "
        "WHERE expires_at < ? ORDER BY expires_at LIMIT ?)",
        (now - WAITER_GRACE_SECONDS, _SWEEP_BATCH),
    )
    return True, token, key, True, None


def _drop_ticket(conn: Any, ticket: int | None) -> None:
    if ticket is not None:
        conn.execute("DELETE FROM session_turn_waiters WHERE ticket = ?", (ticket,))


@handles(WithdrawTurnTicket)
def withdraw_turn_ticket(conn: Any, cmd: WithdrawTurnTicket) -> tuple[bool, str | None]:
    row = conn.execute("SELECT conversation_id FROM session_turn_waiters WHERE ticket = ?", (cmd.ticket,)).fetchone()
    if row is None:
        return False, None
    conn.execute("DELETE FROM session_turn_waiters WHERE ticket = ?", (cmd.ticket,))
    return True, row[0]


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
