"""Small SQL helpers shared by several handlers."""

from __future__ import annotations

from typing import Any

from ...commands.leases import TurnFence
from ...errors import SessionNotFoundError, SessionTurnLeaseLostError
from ...rules import append_refusal, fence_holds, fence_renewal_due, holder_process_is_dead  # noqa: F401  (re-exported)

GC_PROMPTS_SQL = (
    "DELETE FROM system_prompts WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions WHERE sessions.system_prompt_hash = system_prompts.hash)"
)


def gc_prompts(conn: Any) -> None:
    """Drop prompt rows no session points at any more."""
    conn.execute(GC_PROMPTS_SQL)


def changes(conn: Any) -> int:
    """Rows changed by the last INSERT/UPDATE/DELETE on ``conn``.

    ``cursor.rowcount`` cannot be trusted for a statement that starts with
    ``WITH``: Python's own ``sqlite3`` (3.10-3.13) reports -1 for it, so such
    statements ask SQLite directly.
    """
    return int(conn.execute("SELECT changes()").fetchone()[0])


def store_prompt(conn: Any, prompt: str | None, digest: str | None) -> None:
    if prompt is not None and digest is not None:
        conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, prompt))


# One verdict per (session, fence) key, in the keys' order: None (admitted) or the caller's exception.
Verdicts = list[BaseException | None]

_RENEW_SQL = "UPDATE session_turn_leases SET expires_at = ? WHERE conversation_id = ? AND holder = ? AND token = ?"


def append_verdicts(conn: Any, keys: list[tuple[str, TurnFence | None]], now: float) -> Verdicts:
    """The admission verdict of each (session, fence) pair, in order: one query per 500 sessions, leases joined in.

    The verdict is None when the write may go ahead, else the exception its
    caller gets (``rules.append_refusal``: SessionTurnLeaseLostError,
    CompressionSessionClosedError, SessionNotFoundError). An admitted fence
    whose lease expired without a takeover renews it here, in the write's
    own transaction.
    """
    ids = list({session_id for session_id, _ in keys})
    fences = [fence for _, fence in keys]
    fenced = fences.count(None) < len(fences)
    # session id -> (end reason of an ended session, conversation key); conversation -> lease row.
    sessions: dict[str, tuple[str | None, str]] = {}
    leases: dict[str, tuple[str, int, float]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        if not fenced:
            for session_id, ended_at, end_reason, conversation in conn.execute(_SESSIONS_SQL.format(marks), chunk):
                sessions[session_id] = (end_reason if ended_at is not None else None, conversation or session_id)
            continue
        # The lease rides along with its session (one statement instead of two: a fenced batch's
        # admission check was most of what fencing added per append, bench/turn_leases.py).
        for session_id, ended_at, end_reason, conversation, holder, token, expires_at in conn.execute(
            _SESSIONS_AND_LEASES_SQL.format(marks), chunk
        ):
            sessions[session_id] = (end_reason if ended_at is not None else None, conversation)
            if holder is not None:
                leases[conversation] = (holder, token, expires_at)
    # A fenced write to an unknown session is judged against a lease keyed by its id (upstream's order:
    # the lease first); such rows cannot ride along with a session row, so they are looked up alone.
    orphans = list({sid for sid, fence in keys if fence is not None and sid not in sessions})
    for start in range(0, len(orphans), 500):
        chunk = orphans[start : start + 500]
        for conversation, holder, token, expires_at in conn.execute(_LEASES_SQL.format(", ".join("?" * len(chunk))), chunk):
            leases[conversation] = (holder, token, expires_at)
    verdicts: Verdicts = []
    for session_id, fence in keys:
        closed_by, conversation = sessions.get(session_id, (None, session_id))
        holder, token, expires_at = leases.get(conversation, (None, None, None))
        fence_ok = fence_holds(fence, holder, token)
        verdicts.append(append_refusal(session_id, session_id in sessions, closed_by, fence_ok))
        if fence_ok and fence is not None and fence_renewal_due(fence, expires_at, now):
            conn.execute(_RENEW_SQL, (now + fence.ttl_seconds, conversation, holder, token))
            leases[conversation] = (holder, token, now + fence.ttl_seconds)  # type: ignore[assignment]
    return verdicts


_SESSIONS_SQL = "SELECT id, ended_at, end_reason, conversation_id FROM sessions WHERE id IN ({})"
_SESSIONS_AND_LEASES_SQL = (
    "SELECT s.id, s.ended_at, s.end_reason, COALESCE(s.conversation_id, s.id), l.holder, l.token, l.expires_at "
    "FROM sessions AS s LEFT JOIN session_turn_leases AS l ON l.conversation_id = COALESCE(s.conversation_id, s.id) "
    "WHERE s.id IN ({})"
)
_LEASES_SQL = "SELECT conversation_id, holder, token, expires_at FROM session_turn_leases WHERE conversation_id IN ({})"


# One session's guard state in one statement: whether it exists and the end reason of an ended one.
_GUARD_SQL = (
    "SELECT s.id IS NOT NULL, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END "
    "FROM (SELECT 1) LEFT JOIN sessions AS s ON s.id = ?1"
)
# The same with the session's conversation key and that conversation's turn lease.
_FENCED_GUARD_SQL = (
    "SELECT s.id IS NOT NULL, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END, "
    "COALESCE(s.conversation_id, ?1), l.holder, l.token, l.expires_at "
    "FROM (SELECT 1) LEFT JOIN sessions AS s ON s.id = ?1 "
    "LEFT JOIN session_turn_leases AS l ON l.conversation_id = COALESCE(s.conversation_id, ?1)"
)


def append_verdict(conn: Any, session_id: str, fence: TurnFence | None, now: float) -> BaseException | None:
    """:func:`append_verdicts` of one (session, fence) pair, by a one-row statement of its own."""
    if fence is None:
        exists, closed_by = conn.execute(_GUARD_SQL, (session_id,)).fetchone()
        return append_refusal(session_id, bool(exists), closed_by)
    exists, closed_by, conversation, holder, token, expires_at = conn.execute(_FENCED_GUARD_SQL, (session_id,)).fetchone()
    fence_ok = fence_holds(fence, holder, token)
    if fence_ok and fence_renewal_due(fence, expires_at, now):
        conn.execute(_RENEW_SQL, (now + fence.ttl_seconds, conversation, holder, token))
    return append_refusal(session_id, bool(exists), closed_by, fence_ok)


def require_fence(conn: Any, session_id: str, fence: TurnFence | None, now: float) -> None:
    """Raise :class:`SessionTurnLeaseLostError` unless ``fence`` (if any) still holds the session's conversation."""
    if fence is None:
        return
    refusal = append_verdict(conn, session_id, fence, now)
    if isinstance(refusal, SessionTurnLeaseLostError):
        raise refusal


def require_session(conn: Any, session_id: str, what: str = "session") -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(session_id, what=what)
