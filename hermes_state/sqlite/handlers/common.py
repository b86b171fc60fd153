"""Small SQL helpers shared by several handlers."""

from __future__ import annotations

from typing import Any

from ...errors import CompressionSessionClosedError, SessionCompressionInProgressError, SessionNotFoundError

GC_PROMPTS_SQL = (
    "DELETE FROM system_prompts WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions WHERE sessions.system_prompt_hash = system_prompts.hash)"
)


def gc_prompts(conn: Any) -> None:
    """Drop prompt rows no session points at any more."""
    conn.execute(GC_PROMPTS_SQL)


def store_prompt(conn: Any, prompt: str | None, digest: str | None) -> None:
    if prompt is not None and digest is not None:
        conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, prompt))


_GUARD_SQL = """
SELECT
    (SELECT holder FROM compression_locks WHERE session_id = ?1 AND expires_at > ?2),
    (SELECT end_reason FROM sessions WHERE id = ?1 AND ended_at IS NOT NULL),
    EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
"""


def check_append_allowed(conn: Any, session_id: str, holder: str | None, now: float, *, lease: bool = True) -> bool:
    """Enforce the append admission guards; returns whether the session exists.

    Another writer's live compression lease raises
    SessionCompressionInProgressError (the facade retries it for a while);
    a session closed by compression raises CompressionSessionClosedError.
    """
    lease_holder, end_reason, exists = conn.execute(_GUARD_SQL, (session_id, now)).fetchone()
    if lease and lease_holder is not None and lease_holder != holder:
        raise SessionCompressionInProgressError(session_id)
    if end_reason == "compression":
        raise CompressionSessionClosedError(session_id)
    return bool(exists)


def require_session(conn: Any, session_id: str, what: str = "session") -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(session_id, what=what)
