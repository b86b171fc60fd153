"""Read queries for session titles (the names and result shapes of ``sqlite.queries.titles``)."""

from __future__ import annotations

from typing import Any

from ...rules import NUMBERED_TITLE, like_escape, numbered_titles
from .compression import session_rows
from .registry import query


async def _numbered(conn: Any, base: str) -> list[tuple[str, int, float]]:
    """``(id, n, started_at)`` of every session titled exactly ``"<base> #<n>"``.

    LIKE narrows the scan; the regex then drops what LIKE over-matches (a
    non-numeric suffix). PostgreSQL's LIKE is case-sensitive where SQLite's
    is not, but the regex keeps only exact-case matches on both.
    """
    rows = await conn.fetch(
        "SELECT id, title, started_at FROM sessions WHERE title LIKE $1 ESCAPE '\\'", f"{like_escape(base)} #%"
    )
    return numbered_titles(rows, base)


@query
async def session_title_row(conn: Any, session_id: str) -> tuple[str | None, str | None] | None:
    """``(title, title_source)`` of the session, or None when it does not exist."""
    row = await conn.fetchrow("SELECT title, title_source FROM sessions WHERE id = $1", session_id)
    return None if row is None else (row[0], row[1])


@query
async def session_by_title(conn: Any, title: str) -> dict[str, Any] | None:
    rows = await session_rows(conn, "s.title = $1", (title,))
    return rows[0] if rows else None


@query
async def session_id_by_title(conn: Any, title: str) -> str | None:
    """The newest ``"<title> #<n>"`` session, else the session titled exactly ``title``."""
    numbered = await _numbered(conn, title)
    if numbered:
        return max(numbered, key=lambda item: (item[2], item[0]))[0]
    return await conn.fetchval("SELECT id FROM sessions WHERE title = $1", title)


@query
async def next_lineage_title(conn: Any, base_title: str) -> str:
    match = NUMBERED_TITLE.match(base_title)
    base = match.group(1) if match else base_title
    numbers = [n for _, n, _ in await _numbered(conn, base)]
    has_base = await conn.fetchval("SELECT 1 FROM sessions WHERE title = $1", base) is not None
    if not numbers and not has_base:
        return base
    # The bare title counts as #1.
    return f"{base} #{max([1, *numbers]) + 1}"
