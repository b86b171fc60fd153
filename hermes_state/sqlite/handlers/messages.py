"""Handlers that write transcript rows."""

from __future__ import annotations

import time
from typing import Any, Iterable

from ...commands.messages import AppendMessages, MessageRow, PopMessage, ReplaceMessages
from ...encoding import decode_message_row, encode_tool_calls
from ...errors import CompressionSessionClosedError, SessionNotFoundError
from ..queries.core import fetch_dicts
from .common import append_verdicts
from .registry import handles, handles_bulk

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
    verdict = append_verdicts(conn, [(cmd.session_id, cmd.compression_lock_holder)], time.time())
    refusal = next(iter(verdict.values()))
    if refusal is not None:
        raise refusal
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


@handles_bulk(AppendMessages)
def append_messages_bulk(conn: Any, commands: list[AppendMessages]) -> list[tuple[bool, Any]]:
    """Many agents' appends in one batch: one guard check per session, one executemany.

    Row ids come from AUTOINCREMENT inside this exclusive transaction, so the
    rows of one executemany get consecutive ids in list order; each command's
    ids are read off that range.
    """
    verdicts = append_verdicts(conn, [(c.session_id, c.compression_lock_holder) for c in commands], time.time())
    outcomes: list[tuple[bool, Any] | None] = [None] * len(commands)
    params: list[tuple[Any, ...]] = []
    accepted: list[int] = []
    counts: dict[str, list[int]] = {}
    for index, cmd in enumerate(commands):
        verdict = verdicts[(cmd.session_id, cmd.compression_lock_holder)]
        if verdict is not None:
            outcomes[index] = (False, verdict)
            continue
        accepted.append(index)
        params.extend(row_params(cmd.session_id, row) for row in cmd.rows)
        tally = counts.setdefault(cmd.session_id, [0, 0])
        tally[0] += len(cmd.rows)
        tally[1] += sum(row.tool_call_count for row in cmd.rows)
    if params:
        conn.executemany(INSERT_MESSAGE_SQL, params)
        next_id = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0]) - len(params) + 1
        for index in accepted:
            cmd = commands[index]
            outcomes[index] = (True, next_id + len(cmd.rows) - 1 if cmd.want_id else len(cmd.rows))
            next_id += len(cmd.rows)
        conn.executemany(
            "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
            "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
            [(added, calls, session_id) for session_id, (added, calls) in counts.items()],
        )
    return [o for o in outcomes if o is not None]


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


@handles(PopMessage)
def pop_message(conn: Any, cmd: PopMessage) -> dict[str, Any] | None:
    # The append guards apply: removing rows under someone else's compaction
    # would desynchronise the summary it is writing.
    verdict = append_verdicts(conn, [(cmd.session_id, None)], time.time())
    refusal = next(iter(verdict.values()))
    if isinstance(refusal, SessionNotFoundError):
        return None
    if refusal is not None:
        raise refusal
    rows = fetch_dicts(
        conn, "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id DESC LIMIT 1", (cmd.session_id,)
    )
    if not rows:
        return None
    row = rows[0]
    conn.execute("DELETE FROM messages WHERE id = ?", (row["id"],))
    _, calls = encode_tool_calls(row["tool_calls"])
    conn.execute(
        "UPDATE sessions SET message_count = MAX(COALESCE(message_count, 0) - 1, 0), "
        "tool_call_count = MAX(COALESCE(tool_call_count, 0) - ?, 0) WHERE id = ?",
        (calls, cmd.session_id),
    )
    return decode_message_row(row)
