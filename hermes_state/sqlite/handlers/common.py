"""Small SQL helpers shared by several handlers."""

from __future__ import annotations

from typing import Any

from ...errors import SessionNotFoundError
from ...rules import append_refusal, holder_process_is_dead  # noqa: F401  (re-exported)

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


def append_verdicts(
    conn: Any, keys: list[tuple[str, str | None]], now: float
) -> dict[tuple[str, str | None], BaseException | None]:
    """The append admission guards for each (session, holder) pair, in two queries for the set.

    The verdict is None when the append may go ahead, else the exception its
    caller gets: CompressionSessionClosedError for a session closed by
    compression, SessionCompressionInProgressError for another live holder's
    lease (the facade retries it for a while), SessionNotFoundError for an
    unknown session.
    """
    ids = sorted({session_id for session_id, _ in keys})
    sessions: dict[str, Any] = {}
    leases: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for session_id, ended_at, end_reason in conn.execute(
            f"SELECT id, ended_at, end_reason FROM sessions WHERE id IN ({marks})", chunk
        ):
            sessions[session_id] = end_reason if ended_at is not None else None
        for session_id, lease_holder in conn.execute(
            f"SELECT session_id, holder FROM compression_locks WHERE session_id IN ({marks}) AND expires_at > ?",
            (*chunk, now),
        ):
            leases[session_id] = lease_holder
    verdicts: dict[tuple[str, str | None], BaseException | None] = {}
    for session_id, holder in keys:
        verdicts[(session_id, holder)] = append_refusal(
            session_id, session_id in sessions, sessions.get(session_id), leases.get(session_id), holder
        )
    return verdicts


# One session's guard state in one statement: whether it exists, the end
# reason of an ended one, the holder of a live compression lease.
_GUARD_SQL = (
    "SELECT s.id IS NOT NULL, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END, "
    "(SELECT holder FROM compression_locks WHERE session_id = ?1 AND expires_at > ?2) "
    "FROM (SELECT 1) LEFT JOIN sessions AS s ON s.id = ?1"
)


def append_verdict(conn: Any, session_id: str, holder: str | None, now: float) -> BaseException | None:
    """:func:`append_verdicts` of one (session, holder) pair, in one query instead of two."""
    exists, closed_by, lease_holder = conn.execute(_GUARD_SQL, (session_id, now)).fetchone()
    return append_refusal(session_id, bool(exists), closed_by, lease_holder, holder)


def require_session(conn: Any, session_id: str, what: str = "session") -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(session_id, what=what)
