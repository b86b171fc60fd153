"""Handlers that write transcript rows."""

from __future__ import annotations

import time
from typing import Any, Iterable

from ...commands.messages import AppendMessages, MessageRow, ReplaceMessages
from ...errors import CompressionSessionClosedError, SessionNotFoundError
from .common import check_append_allowed
from .registry import handles

INSERT_MESSAGE_SQL = """
INSERT INTO messages (
    session_id, role, content, tool_call_id, tool_calls, tool_name, effect_disposition,
    timestamp, token_count, finish_reason, reasoning, reasoning_content, reasoning_details,
    codex_reasoning_items, codex_message_items, platform_message_id, observed, api_content,
    display_kind, display_metadata
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


def row_params(session_id: str, row: MessageRow) -> tuple[Any, ...]:
    """Insert parameters for one encoded row (the struct's field order is the column order)."""
    return (
        session_id, row.role, row.content, row.tool_call_id, row.tool_calls, row.tool_name,
        row.effect_disposition, row.timestamp, row.token_count, row.finish_reason, row.reasoning,
        row.reasoning_content, row.reasoning_details, row.codex_reasoning_items,
        row.codex_message_items, row.platform_message_id, row.observed, row.api_content,
        row.display_kind, row.display_metadata,
    )


def insert_rows(conn: Any, session_id: str, rows: Iterable[MessageRow]) -> tuple[int, int]:
    """Insert encoded rows in order; returns (rows inserted, tool calls among them)."""
    rows = tuple(rows)
    if not rows:
        return 0, 0
    conn.executemany(INSERT_MESSAGE_SQL, [row_params(session_id, r) for r in rows])
    return len(rows), sum(r.tool_call_count for r in rows)


@handles(AppendMessages)
def append_messages(conn: Any, cmd: AppendMessages) -> int:
    if not check_append_allowed(conn, cmd.session_id, cmd.compression_lock_holder, time.time()):
        raise SessionNotFoundError(cmd.session_id)
    if cmd.want_id and len(cmd.rows) == 1:
        row = cmd.rows[0]
        cur = conn.execute(INSERT_MESSAGE_SQL, row_params(cmd.session_id, row))
        result = int(cur.lastrowid)
        added, calls = 1, row.tool_call_count
    else:
        added, calls = insert_rows(conn, cmd.session_id, cmd.rows)
        result = added
    conn.execute(
        "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
        "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
        (added, calls, cmd.session_id),
    )
    return result


@handles(ReplaceMessages)
def replace_messages(conn: Any, cmd: ReplaceMessages) -> None:
    row = conn.execute("SELECT ended_at, end_reason FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
    if row is None:
        if cmd.rows:
            raise SessionNotFoundError(cmd.session_id)
        return
    if row[0] is not None and row[1] == "compression":
        raise CompressionSessionClosedError(cmd.session_id)
    if cmd.archive_dropped:
        conn.execute("UPDATE messages SET active = 0 WHERE session_id = ? AND active = 1", (cmd.session_id,))
    elif cmd.active_only:
        conn.execute("DELETE FROM messages WHERE session_id = ? AND active = 1", (cmd.session_id,))
    else:
        conn.execute("DELETE FROM messages WHERE session_id = ?", (cmd.session_id,))
    added, calls = insert_rows(conn, cmd.session_id, cmd.rows)
    conn.execute(
        "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
        (added, calls, cmd.session_id),
    )
