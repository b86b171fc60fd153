"""Handlers for session titles and lineage-wide flags."""

from __future__ import annotations

from typing import Any

from ...commands.titles import SetLineageFlag, SetSessionTitle, SetSessionTitleSource
from ...rules import TITLE_RANK, title_rank
from ..queries.compression import lineage_ids_cte
from ..conversations import same_conversation_sql
from .common import changes
from .registry import handles


def _is_compression_ancestor(conn: Any, ancestor_id: str, session_id: str) -> bool:
    row = conn.execute(
        lineage_ids_cte("?1") + "SELECT 1 FROM ancestors WHERE id = ?2 AND id <> ?1",
        (session_id, ancestor_id),
    ).fetchone()
    return row is not None


@handles(SetSessionTitle)
def set_session_title(conn: Any, cmd: SetSessionTitle) -> bool:
    current = conn.execute("SELECT title, title_source FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
    if current is None:
        return False
    title, source = current
    if cmd.source != "user" and title is not None and title_rank(source) >= TITLE_RANK[cmd.source]:
        return False
    if cmd.title is not None:
        holder = conn.execute(
            "SELECT id FROM sessions WHERE title = ? AND id <> ?", (cmd.title, cmd.session_id)
        ).fetchone()
        if holder is not None:
            if not _is_compression_ancestor(conn, holder[0], cmd.session_id):
                raise ValueError(f"Title '{cmd.title}' is already in use by session {holder[0]}")
            # A compressed ancestor hands its title on to the live continuation.
            conn.execute("UPDATE sessions SET title = NULL, title_source = NULL WHERE id = ?", (holder[0],))
    cur = conn.execute(
        "UPDATE sessions SET title = ?, title_source = ? WHERE id = ? AND title IS ? AND title_source IS ?",
        (cmd.title, cmd.source if cmd.title is not None else None, cmd.session_id, title, source),
    )
    return cur.rowcount > 0


@handles(SetSessionTitleSource)
def set_session_title_source(conn: Any, cmd: SetSessionTitleSource) -> bool:
    cur = conn.execute(
        "UPDATE sessions SET title_source = ? WHERE id = ? AND title IS NOT NULL", (cmd.source, cmd.session_id)
    )
    return cur.rowcount > 0


_FLAG_COLUMNS = ("archived", "pinned", "hidden", "last_read_at")


@handles(SetLineageFlag)
def set_lineage_flag(conn: Any, cmd: SetLineageFlag) -> int:
    if cmd.column not in _FLAG_COLUMNS:
        raise ValueError(f"not a lineage flag: {cmd.column!r}")
    value = cmd.value if cmd.column == "last_read_at" else int(cmd.value)
    conn.execute(
        f"UPDATE sessions SET {cmd.column} = ?2 WHERE {same_conversation_sql('?1')}",
        (cmd.session_id, value),
    )
    return changes(conn)
