"""Read queries for session titles."""

from __future__ import annotations

from typing import Any

from ...rules import NUMBERED_TITLE, like_escape, numbered_titles
from .compression import session_rows
from .registry import query


def _numbered(conn: Any, base: str) -> list[tuple[str, int, float]]:
    """``(id, n, started_at)`` of every session titled exactly ``"<base> #<n>"``.

    LIKE narrows the scan; the regex then drops what LIKE over-matches
    (other letter case, a non-numeric suffix).
    """
    rows = conn.execute(
        "SELECT id, title, started_at FROM sessions WHERE title LIKE ? ESCAPE '\\'",
        (f"{like_escape(base)} #%",),
    ).fetchall()
    return numbered_titles(rows, base)


@query
def session_title_row(conn: Any, session_id: str) -> tuple[str | None, str | None] | None:
    """``(title, title_source)`` of the session, or None when it does not exist."""
    row = conn.execute("SELECT title, title_source FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else (row[0], row[1])


@query
def session_by_title(conn: Any, title: str) -> dict[str, Any] | None:
    rows = session_rows(conn, "s.title = ?", (title,))
    return rows[0] if rows else None


@query
def session_id_by_title(conn: Any, title: str) -> str | None:
    """The newest ``"<title> #<n>"`` session, else the session titled exactly ``title``."""
    numbered = _numbered(conn, title)
    if numbered:
        return max(numbered, key=lambda item: (item[2], item[0]))[0]
    row = conn.execute("SELECT id FROM sessions WHERE title = ?", (title,)).fetchone()
    return None if row is None else row[0]


@query
def next_lineage_title(conn: Any, base_title: str) -> str:
    match = NUMBERED_TITLE.match(base_title)
    base = match.group(1) if match else base_title
    numbers = [n for _, n, _ in _numbered(conn, base)]
    has_base = conn.execute("SELECT 1 FROM sessions WHERE title = ?", (base,)).fetchone() is not None
    if not numbers and not has_base:
        return base
    # The bare title counts as #1.
    return f"{base} #{max([1, *numbers]) + 1}"
