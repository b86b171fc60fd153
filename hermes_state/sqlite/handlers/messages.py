"""Handlers that write transcript rows."""

from __future__ import annotations

import time
from itertools import repeat
from typing import Any, Sequence

from ...commands.messages import AppendMessages, MessageRow, PopMessage, ReplaceMessages
from ...encoding import decode_message_row, encode_tool_calls
from ...errors import CompressionSessionClosedError, SessionNotFoundError
from ..queries.core import fetch_dicts
from .common import append_verdict, append_verdicts, require_fence
from .message_rows import insert_message_rows
from .registry import handles, handles_bulk

_COUNT_SQL = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
    "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?"
)


def insert_rows(conn: Any, session_id: str, rows: Sequence[MessageRow]) -> tuple[int, int]:
    """Insert encoded rows in order; returns (rows inserted, tool calls among them)."""
    if not rows:
        return 0, 0
    insert_message_rows(conn, ((session_id, row) for row in rows), len(rows))
    return len(rows), sum(r.tool_call_count for r in rows)


@handles(AppendMessages)
def append_messages(conn: Any, cmd: AppendMessages) -> int:
    session_id = cmd.session_id
    rows = cmd.rows
    refusal = append_verdict(conn, session_id, cmd.fence, time.time())
    if refusal is not None:
        raise refusal
    n = len(rows)
    ids = insert_message_rows(conn, zip(repeat(session_id, n), rows), n, returning=cmd.want_id)
    calls = rows[0].tool_call_count if n == 1 else sum(row.tool_call_count for row in rows)
    conn.execute(_COUNT_SQL, (n, calls, session_id))
    return ids[-1] if cmd.want_id and ids else n


@handles_bulk(AppendMessages)
def append_messages_bulk(conn: Any, commands: list[AppendMessages]) -> list[tuple[bool, Any]]:
    """Many agents' appends in one batch: one guard check for the set, one multi-row INSERT.

    The ids come back in list order (see ``insert_message_rows``); each
    command that asked for one gets the id of its own last row.
    """
    verdicts = append_verdicts(conn, [(c.session_id, c.fence) for c in commands], time.time())
    outcomes: list[tuple[bool, Any] | None] = [None] * len(commands)
    accepted: list[int] = []
    counts: dict[str, list[int]] = {}
    for index, (cmd, verdict) in enumerate(zip(commands, verdicts)):
        if verdict is not None:
            outcomes[index] = (False, verdict)
            continue
        accepted.append(index)
        tally = counts.setdefault(cmd.session_id, [0, 0])
        tally[0] += len(cmd.rows)
        tally[1] += sum(row.tool_call_count for row in cmd.rows)
    total = sum(len(commands[i].rows) for i in accepted)
    if total:
        pairs = ((commands[i].session_id, row) for i in accepted for row in commands[i].rows)
        ids = insert_message_rows(conn, pairs, total, returning=any(commands[i].want_id for i in accepted))
        end = 0
        for index in accepted:
            cmd = commands[index]
            end += len(cmd.rows)
            outcomes[index] = (True, ids[end - 1] if cmd.want_id and cmd.rows else len(cmd.rows))
        conn.executemany(_COUNT_SQL, [(added, calls, session_id) for session_id, (added, calls) in counts.items()])
    return [o for o in outcomes if o is not None]


@handles(ReplaceMessages)
def replace_messages(conn: Any, cmd: ReplaceMessages) -> None:
    require_fence(conn, cmd.session_id, cmd.fence, time.time())
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
    # The append guards apply: a session closed by compression takes no more edits.
    refusal = append_verdict(conn, cmd.session_id, cmd.fence, time.time())
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
