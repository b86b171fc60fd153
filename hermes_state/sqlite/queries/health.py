"""Read queries for health checks: file integrity and the compression lease table."""

from __future__ import annotations

from typing import Any

from .core import fetch_dicts
from .registry import query

# integrity_check stops after this many problems; a damaged file can report thousands.
MAX_INTEGRITY_PROBLEMS = 20


@query
def integrity_problems(conn: Any) -> list[str]:
    """``PRAGMA integrity_check`` on the read connection: [] when clean, else the first problems."""
    rows = conn.execute(f"PRAGMA integrity_check({MAX_INTEGRITY_PROBLEMS})").fetchall()
    problems = [str(row[0]) for row in rows]
    return [] if problems == ["ok"] else problems


@query
def compression_leases(conn: Any) -> list[dict[str, Any]]:
    """Every row of ``compression_locks`` (live and expired), oldest acquisition first."""
    return fetch_dicts(
        conn,
        "SELECT session_id, holder, acquired_at, expires_at FROM compression_locks ORDER BY acquired_at, session_id",
    )
