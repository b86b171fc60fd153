"""Core read queries (sessions, messages, meta).

Each function takes the raw DB-API connection first. A function that issues
several statements does so inside one read transaction, so it sees a single
committed snapshot.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Sequence

from ...conversation import owns_transcript, transcript_ids
from ...encoding import (
    JSON_CONTENT_PREFIX,
    decode_content,
    decode_display_metadata,
    decode_message_row,
    decode_tool_calls,
)
from .registry import query

__all__ = [
    "fetch_dicts",
    "fetch_messages",
    "get_session",
    "message_storage_state",
    "get_messages",
    "conversation_rows",
    "message_count",
    "get_meta",
]


def fetch_dicts(conn: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run ``sql`` and return its rows as dicts keyed by column name, in column order."""
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


# Rows fetched and turned into dicts per step: a slice's tuples are freed
# before the next is fetched, so they stay in cache and never pile up.
SLICE_ROWS = 128  # measured: 128 beats 32, 64, 256, 512 and 1,024


def fetch_messages(conn: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run a ``SELECT *`` over ``messages`` and return decoded row dicts (as ``decode_message_row`` makes them).

    Runs whole on the reader thread, so the event loop receives finished
    dicts. Each dict is a copy of one all-keys template filled by
    ``dict.update`` (no per-row resizing, about a third cheaper than
    ``dict(zip(...))``), built slice by slice; the decoders run only on the
    cells that need them, found column by column.
    """
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    if not {"content", "tool_calls", "display_metadata"} <= set(names):
        return [decode_message_row(dict(zip(names, row))) for row in cur.fetchall()]
    content_at = itemgetter(names.index("content"))
    sidecars = [
        (key, itemgetter(names.index(key)), decode)
        for key, decode in (("tool_calls", decode_tool_calls), ("display_metadata", decode_display_metadata))
    ]
    blank = dict.fromkeys(names)
    out: list[dict[str, Any]] = []
    while True:
        rows = cur.fetchmany(SLICE_ROWS)
        if not rows:
            return out
        part = list(map(dict.copy, repeat(blank, len(rows))))
        deque(map(dict.update, part, map(zip, repeat(names), rows)), maxlen=0)
        for i, value in enumerate(map(content_at, rows)):
            if value.__class__ is str and value.startswith(JSON_CONTENT_PREFIX):
                part[i]["content"] = decode_content(value)
        for key, cell_at, decode in sidecars:
            cells = list(map(cell_at, rows))
            if cells.count(None) != len(cells):
                for i, value in enumerate(cells):
                    if value is not None:
                        part[i][key] = decode(value)
        out += part


class snapshot:
    """Context manager: one read transaction around several statements."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.opened = False

    def __enter__(self) -> Any:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN")
            self.opened = True
        return self.conn

    def __exit__(self, *exc: Any) -> None:
        if self.opened and self.conn.in_transaction:
            self.conn.execute("COMMIT")


_SESSION_SQL = """
SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt
FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash
WHERE s.id = ?
"""


def resolve_prompt(row: dict[str, Any]) -> dict[str, Any]:
    """Replace the inline ``system_prompt`` with the de-duplicated prompt text."""
    row["system_prompt"] = row.pop("_resolved_prompt")
    return row


@query
def get_session(conn: Any, session_id: str) -> dict[str, Any] | None:
    rows = fetch_dicts(conn, _SESSION_SQL, (session_id,))
    return resolve_prompt(rows[0]) if rows else None


@query
def get_messages(
    conn: Any,
    session_id: str,
    include_inactive: bool,
    limit: int | None,
    offset: int,
    latest: bool,
    after_id: int | None,
    before_id: int | None,
) -> list[dict[str, Any]]:
    where = ["session_id = ?"]
    params: list[Any] = [session_id]
    if not include_inactive:
        where.append("active = 1")
    if after_id is not None:
        where.append("id > ?")
        params.append(after_id)
    if before_id is not None:
        where.append("id < ?")
        params.append(before_id)
    sql = f"SELECT * FROM messages WHERE {' AND '.join(where)} ORDER BY id {'DESC' if latest else 'ASC'}"
    if limit is not None or offset:
        sql += " LIMIT ? OFFSET ?"
        params.extend([-1 if limit is None else limit, offset])
    rows = fetch_messages(conn, sql, params)
    if latest:
        rows.reverse()
    return rows


def _parent_links(
    conn: Any, session_id: str, max_hops: int, until: Callable[[str | None], bool] | None = None
) -> list[tuple[str, str | None]]:
    """``(id, model_config)`` of the session and its ancestors via ``parent_session_id``, tip first (cycle-safe).

    The walk also ends after a session whose ``model_config`` ``until`` accepts.
    """
    links: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    current: str | None = session_id
    while current is not None and current not in seen and len(links) <= max_hops:
        row = conn.execute("SELECT parent_session_id, model_config FROM sessions WHERE id = ?", (current,)).fetchone()
        links.append((current, None if row is None else row[1]))
        if row is None or (until is not None and until(row[1])):
            break
        seen.add(current)
        current = row[0]
    return links


def session_chain(conn: Any, session_id: str, max_hops: int = 100) -> list[str]:
    """The session and its ancestors via ``parent_session_id``, root first (cycle-safe)."""
    return [link[0] for link in reversed(_parent_links(conn, session_id, max_hops))]


def transcript_chain(conn: Any, session_id: str, max_hops: int = 100) -> list[str]:
    """The sessions whose rows make up ``session_id``'s transcript, root first (see ``conversation.transcript_ids``)."""
    return transcript_ids(_parent_links(conn, session_id, max_hops, owns_transcript))


@query
def conversation_rows(conn: Any, session_id: str, include_ancestors: bool, include_inactive: bool) -> list[dict[str, Any]]:
    """Raw message rows of the session (and its transcript's ancestors), root to tip, by id."""
    with snapshot(conn):
        ids = transcript_chain(conn, session_id) if include_ancestors else [session_id]
        marks = ", ".join("?" * len(ids))
        active = "" if include_inactive else " AND active = 1"
        return fetch_dicts(
            conn, f"SELECT * FROM messages WHERE session_id IN ({marks}){active} ORDER BY id", ids
        )


@query
def message_count(conn: Any, session_id: str | None) -> int:
    if session_id:
        return int(conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[0])
    return int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])


@query
def message_storage_state(conn: Any, message_id: int) -> dict[str, Any] | None:
    rows = fetch_dicts(conn, "SELECT session_id, active, compacted FROM messages WHERE id = ?", (message_id,))
    return rows[0] if rows else None


@query
def get_meta(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]
