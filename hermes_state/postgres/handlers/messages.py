"""Handlers that write transcript rows (the session rows are already locked by the writer)."""

from __future__ import annotations

from typing import Any

from ...commands.messages import AppendMessages, PopMessage, ReplaceMessages
from ...encoding import decode_message_row, encode_tool_calls
from ...errors import CompressionSessionClosedError, SessionNotFoundError
from ..queries.core import MESSAGE_SELECT, message_dict
from .common import insert_messages, require_fence, transcript_verdict
from .guarded_append import guarded_append
from .registry import handles, handles_bulk


def _append_result(cmd: AppendMessages, ids: list[int]) -> int:
    return ids[-1] if cmd.want_id and ids else len(ids)


@handles(AppendMessages)
async def append_messages(conn: Any, cmd: AppendMessages) -> int:
    done = await guarded_append(conn, [cmd])
    refusal = done.refusals[0]
    if refusal is not None:
        raise refusal
    return _append_result(cmd, done.ids[0])


@handles_bulk(AppendMessages)
async def append_messages_bulk(conn: Any, commands: list[AppendMessages]) -> list[tuple[bool, Any]]:
    """Many agents' appends in one batch: guard, insert and counters in one statement."""
    done = await guarded_append(conn, commands)
    return [
        (False, refusal) if refusal is not None else (True, _append_result(cmd, ids))
        for cmd, refusal, ids in zip(commands, done.refusals, done.ids)
    ]


@handles(ReplaceMessages)
async def replace_messages(conn: Any, cmd: ReplaceMessages) -> None:
    await require_fence(conn, cmd.session_id, cmd.fence)
    row = await conn.fetchrow("SELECT ended_at, end_reason FROM sessions WHERE id = $1", cmd.session_id)
    if row is None:
        if cmd.rows:
            raise SessionNotFoundError(cmd.session_id)
        return
    if row[0] is not None and row[1] == "compression":
        raise CompressionSessionClosedError(cmd.session_id)
    if cmd.archive_dropped:
        await conn.execute("UPDATE messages SET active = 0 WHERE session_id = $1 AND active = 1", cmd.session_id)
    elif cmd.active_only:
        await conn.execute("DELETE FROM messages WHERE session_id = $1 AND active = 1", cmd.session_id)
    else:
        await conn.execute("DELETE FROM messages WHERE session_id = $1", cmd.session_id)
    await insert_messages(conn, [(cmd.session_id, r) for r in cmd.rows], count=False)
    await conn.execute(
        "UPDATE sessions SET message_count = $1, tool_call_count = $2 WHERE id = $3",
        len(cmd.rows), sum(r.tool_call_count for r in cmd.rows), cmd.session_id,
    )


@handles(PopMessage)
async def pop_message(conn: Any, cmd: PopMessage) -> dict[str, Any] | None:
    # The append guards apply: a session closed by compression takes no more edits.
    refusal = await transcript_verdict(conn, cmd.session_id, cmd.fence)
    if isinstance(refusal, SessionNotFoundError):
        return None
    if refusal is not None:
        raise refusal
    record = await conn.fetchrow(
        f"DELETE FROM messages WHERE id = (SELECT id FROM messages WHERE session_id = $1 AND active = 1 "
        f"ORDER BY id DESC LIMIT 1) RETURNING {MESSAGE_SELECT}",
        cmd.session_id,
    )
    if record is None:
        return None
    row = message_dict(record)
    _, calls = encode_tool_calls(row["tool_calls"])
    await conn.execute(
        "UPDATE sessions SET message_count = GREATEST(COALESCE(message_count, 0) - 1, 0), "
        "tool_call_count = GREATEST(COALESCE(tool_call_count, 0) - $1, 0) WHERE id = $2",
        calls, cmd.session_id,
    )
    return decode_message_row(row)
