"""Read queries for health checks: file integrity and the compression lease table."""

from __future__ import annotations

from typing import Any

from ...repairs import LEASE_TABLES
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


@query
def leases(conn: Any) -> list[dict[str, Any]]:
    """Every row of every lease table (``repairs.LEASE_TABLES``) with its ``kind``, oldest acquisition first."""
    rows: list[dict[str, Any]] = []
    for lease in LEASE_TABLES:
        found = fetch_dicts(conn, f"SELECT {lease.key} AS key, holder, acquired_at, expires_at FROM {lease.table}")
        rows.extend({"kind": lease.kind, **row} for row in found)
    return sorted(rows, key=lambda row: (row["acquired_at"], row["kind"], row["key"]))
