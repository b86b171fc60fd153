"""Context windows of search hits, and the clipping of long contents on the way out.

A hit's window is the message before it in its session, the hit, and the
message after it, by ``(timestamp, id)``, whatever their active state. The
neighbours are two ordered probes of ``idx_messages_session`` per hit,
either as columns of the statement that fetches the hit rows
(:func:`window_columns`, one statement fewer) or for a list of hits
afterwards (:func:`contexts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...previews import context_text

__all__ = [
    "CLIP_BYTES",
    "WINDOW_COLUMN_COUNT",
    "clipped",
    "column",
    "contexts",
    "unclip",
    "window",
    "window_columns",
]

# Index routes hand Python at most this many bytes of a hit's content: its
# context needs 200 characters and a snippet the first hits (the bounded
# snippets read the rest only when they must). Cut as bytes, so NULs inside
# the text survive; ``unclip`` turns the cut back into text.
CLIP_BYTES = 65536
# Hits whose context windows one statement looks up.
_CONTEXT_CHUNK = 100


def clipped(expr: str) -> str:
    """``expr`` cut to its first bytes when long, then its type: two result columns."""
    blob = f"CAST({expr} AS BLOB)"
    cut = f"CASE WHEN length({blob}) > {CLIP_BYTES} THEN substr({blob}, 1, {CLIP_BYTES}) ELSE {expr} END"
    return f"{cut}, typeof({expr})"


def column(conn: Any, name: str, message_id: int) -> Any:
    row = conn.execute(f"SELECT {name} FROM messages WHERE id = ?", (message_id,)).fetchone()
    return None if row is None else row[0]


def unclip(conn: Any, message_id: Any, value: Any, kind: str) -> tuple[Any, bool]:
    """(content, was cut) from a :func:`clipped` pair; cut encoded values are read whole again."""
    if kind != "text" or not isinstance(value, bytes):
        return value, False
    if value.startswith(b"\x00"):  # an encoded value (structured content): only whole it decodes
        return column(conn, "content", message_id), False
    return value.decode("utf-8", "replace"), True


def _neighbour(alias: str, sid: str, ts: str, mid: str, before: bool) -> str:
    op, direction = ("<", "DESC") if before else (">", "ASC")
    return (
        f"LEFT JOIN messages AS {alias} ON {alias}.id = ("
        f"SELECT x.id FROM messages AS x WHERE x.session_id = {sid} AND (x.timestamp, x.id) {op} ({ts}, {mid}) "
        f"ORDER BY x.timestamp {direction}, x.id {direction} LIMIT 1)"
    )


# Result columns of a window: (id, role, content, its type) before, then after.
WINDOW_COLUMN_COUNT = 8


def window_columns(sid: str, ts: str, mid: str) -> tuple[str, str]:
    """(select list, joins) that add a hit's neighbours to a statement whose hit has these columns."""
    select = f"wb.id, wb.role, {clipped('wb.content')}, wa.id, wa.role, {clipped('wa.content')}"
    joins = f"{_neighbour('wb', sid, ts, mid, True)} {_neighbour('wa', sid, ts, mid, False)}"
    return select, joins


def window(conn: Any, role: Any, content: Any, row: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The window of a hit from its :func:`window_columns` (None: no neighbour looked up)."""
    found = []
    if row is not None and row[0] is not None:
        found.append({"role": row[1], "content": context_text(unclip(conn, row[0], row[2], row[3])[0])})
    found.append({"role": role, "content": context_text(content)})
    if row is not None and row[4] is not None:
        found.append({"role": row[5], "content": context_text(unclip(conn, row[4], row[6], row[7])[0])})
    return found


_CONTEXT_SELECT, _CONTEXT_JOINS = window_columns("hit.sid", "hit.ts", "hit.id")
_CONTEXT_SQL = "WITH hit(id, sid, ts) AS (VALUES {values}) SELECT hit.id, " + _CONTEXT_SELECT + " FROM hit " + _CONTEXT_JOINS


def contexts(conn: Any, hits: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """For each hit id: the message before it, the hit, the message after (any active state)."""
    windows: dict[int, list[dict[str, Any]]] = {}
    for start in range(0, len(hits), _CONTEXT_CHUNK):
        chunk = hits[start : start + _CONTEXT_CHUNK]
        params = [v for hit in chunk for v in (hit["id"], hit["session_id"], hit["timestamp"])]
        sql = _CONTEXT_SQL.format(values=", ".join(["(?, ?, ?)"] * len(chunk)))
        rows = {row[0]: row[1:] for row in conn.execute(sql, params).fetchall()}
        for hit in chunk:
            windows[hit["id"]] = window(conn, hit["role"], hit["content"], rows.get(hit["id"]))
    return windows
