"""Commands that write transcript rows."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .base import Command
from .leases import TurnFence

# What the ``content`` column may hold after encoding: str, bytes or None (see
# hermes_state.encoding). msgspec cannot decode a union of str and bytes, so
# it is typed as Any; msgpack keeps the two apart on the wire.
ContentValue = Any
# How a backend with a kind column labels stored content (encoding.split_content).
ContentKind = Literal["text", "json", "bytes"]


class MessageRow(msgspec.Struct, frozen=True, array_like=True):
    """One ``messages`` row, already encoded to column values.

    Field order is the insert column order. ``tool_call_count`` is this row's
    contribution to ``sessions.tool_call_count``; it is not a column.
    """

    role: str
    content: ContentValue
    tool_call_id: str | None
    tool_calls: str | None
    tool_name: str | None
    effect_disposition: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    platform_message_id: str | None
    observed: int
    api_content: str | None
    display_kind: str | None
    display_metadata: str | None
    tool_call_count: int = 0


class AppendMessages(Command, frozen=True):
    """Append rows to a session after the turn-lease fence and the closed-by-compression guard.

    Resolves to the id of the last inserted row when ``want_id`` is set
    (``append_message``), else to the number of rows inserted. A compression
    lease never holds an append back (the compaction's watermark keeps rows
    appended meanwhile).
    """

    session_id: str
    rows: tuple[MessageRow, ...]
    want_id: bool = False
    fence: TurnFence | None = None


class ReplaceMessages(Command, frozen=True):
    """Swap a session's transcript for ``rows`` and reset its counters."""

    session_id: str
    rows: tuple[MessageRow, ...]
    active_only: bool = False
    archive_dropped: bool = False
    fence: TurnFence | None = None


class PopMessage(Command, frozen=True):
    """Delete the session's newest active row and resolve to it (decoded), or None.

    One command, so the newest row is chosen and removed inside one
    transaction: concurrent pops take distinct rows, and a pop queued after
    an append removes that append.
    """

    session_id: str
    fence: TurnFence | None = None
