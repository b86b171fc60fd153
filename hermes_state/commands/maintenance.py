"""Commands for deletion, retention (prune / archive), import and storage upkeep."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from .base import Command
from .messages import MessageRow


class SessionFilters(msgspec.Struct, frozen=True, kw_only=True):
    """The prune/archive filter set; every field that is not None narrows the selection.

    Only ended sessions are ever selected. ``last_active`` here is the newest
    message timestamp, else ``started_at`` (the reference's prune clock).
    Text filters ending in ``_like`` are case-insensitive literal substrings.
    """

    last_active_before: float | None = None
    last_active_after: float | None = None
    started_before: float | None = None
    started_after: float | None = None
    source: str | None = None
    title_like: str | None = None
    end_reason: str | None = None
    cwd_prefix: str | None = None
    min_messages: int | None = None
    max_messages: int | None = None
    archived: bool | None = None
    model_like: str | None = None
    provider: str | None = None
    user_id: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    branch_like: str | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    min_tool_calls: int | None = None
    max_tool_calls: int | None = None


class DeleteSessions(Command, frozen=True):
    """Delete the listed sessions that exist plus their delegate descendants; detach other children.

    Resolves to ``(number of listed sessions deleted, every id removed)``.
    """

    session_ids: tuple[str, ...]


class DeleteSessionIfEmpty(Command, frozen=True):
    """Delete an untitled session that has no messages and no children; resolves to a bool."""

    session_id: str


class DeleteEmptySessions(Command, frozen=True):
    """Delete ended, non-archived sessions with ``message_count = 0``; resolves to the ids removed."""


class PruneSessions(Command, frozen=True):
    """Delete the ended sessions matching ``filters`` (children are detached); resolves to the ids."""

    filters: SessionFilters


class PruneEmptyGhostSessions(Command, frozen=True):
    """Delete ended, untitled, message-less ``tui`` sessions started before ``cutoff``; resolves to the ids."""

    cutoff: float


class ArchiveMatchingSessions(Command, frozen=True):
    """Archive the sessions matching ``filters`` together with their compression lineages.

    Resolves to the number of matching sessions.
    """

    filters: SessionFilters


class ArchiveStaleSessions(Command, frozen=True):
    """Archive sessions idle since before ``cutoff`` (not compression-ended parents); resolves to a count."""

    cutoff: float
    exclude_pinned: bool = True


class ImportedSession(msgspec.Struct, frozen=True, kw_only=True):
    """One validated session of an import: column values plus encoded messages.

    ``columns`` holds ``(column, value)`` pairs for the ``sessions`` insert;
    ``title`` is kept apart so the handler can check it is still free.
    """

    index: int
    session_id: str
    columns: tuple[tuple[str, str | int | float | None], ...]
    title: str | None = None
    system_prompt: str | None = None
    system_prompt_hash: str | None = None
    parent_session_id: str | None = None
    rows: tuple[MessageRow, ...] = ()


class ImportSessions(Command, frozen=True):
    """Insert validated sessions all-or-nothing; existing ids are skipped, parents linked last.

    Resolves to the ``import_sessions`` result dict.
    """

    sessions: tuple[ImportedSession, ...]


class Vacuum(Command, frozen=True):
    """FTS optimize, TRUNCATE checkpoint, VACUUM, checkpoint; outside any transaction.

    Resolves to how many FTS tables were optimized.
    """

    standalone: ClassVar[bool] = True
