"""Session titles and lineage-wide flags (archived, pinned, read)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from ..commands.titles import (
    LineageFlag,
    SetLineageFlag,
    SetSessionTitle,
    SetSessionTitleSource,
)
from ..encoding import scrub_surrogates
from ..facade import StoreBase, flag_arg, require_id

__all__ = ["TitleMethods"]

# ASCII controls except tab/newline/CR (the whitespace collapse handles those).
_TITLE_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Zero-width, bidi, line/paragraph separators, BOM, object replacement, interlinear annotation.
_TITLE_INVISIBLES = re.compile(r"[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffc\ufff9-\ufffb]")
_WHITESPACE = re.compile(r"\s+")


def _title_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


class TitleMethods(StoreBase):
    """Session titles and lineage-wide flags (archived, pinned, read)."""

    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        """Return the cleaned title, or None when nothing printable is left.

        Lone surrogates become U+FFFD; control, zero-width and bidi
        characters go; whitespace runs collapse to one space; the ends are
        stripped. Raises ``ValueError("Title too long (<n> chars, max 100)")``.
        """
        if title is None or title == "":
            return None
        cleaned = _TITLE_INVISIBLES.sub("", _TITLE_CONTROLS.sub("", scrub_surrogates(_title_text(title, "title"))))
        cleaned = _WHITESPACE.sub(" ", cleaned).strip()
        if not cleaned:
            return None
        if len(cleaned) > StoreBase.MAX_TITLE_LENGTH:
            raise ValueError(f"Title too long ({len(cleaned)} chars, max {StoreBase.MAX_TITLE_LENGTH})")
        return cleaned

    @staticmethod
    def session_unread(session_row: Mapping[str, Any]) -> bool:
        """True when the session saw activity after it was last read (False if never marked read)."""
        read_at = session_row.get("last_read_at")
        if read_at is None:
            return False
        active = session_row.get("last_active") or session_row.get("started_at") or 0.0
        return float(active) > float(read_at)

    async def _set_title(self, session_id: str, title: str | None, source: str) -> bool:
        cleaned = self.sanitize_title(title)
        command = SetSessionTitle(session_id=require_id(session_id), title=cleaned, source=source)  # type: ignore[arg-type]
        return bool(await self._write(command))

    async def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set the title with user authority; returns whether the row changed (False for unknown ids).

        An empty or blank title clears it. Raises ``ValueError`` when another
        session holds the title, unless that session is a compression
        ancestor of this one: then the title moves here.
        """
        return await self._set_title(session_id, title, self.TITLE_SOURCE_USER)

    async def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """Set a generated title (``source`` "derived" or "llm"); returns whether the row changed.

        Returns False, untouched, when the current title has equal or higher
        authority (derived < llm < user; a title without provenance counts as user).
        """
        if source not in (self.TITLE_SOURCE_DERIVED, self.TITLE_SOURCE_LLM):
            raise ValueError(f"invalid automatic title source: {source!r}")
        return await self._set_title(session_id, title, source)

    async def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """``set_auto_title(session_id, title, source="llm")``; returns whether the row changed."""
        return await self.set_auto_title(session_id, title, source=self.TITLE_SOURCE_LLM)

    async def set_session_title_source(self, session_id: str, source: str) -> bool:
        """Overwrite the provenance of the existing title; returns False for untitled or unknown sessions."""
        if source not in (self.TITLE_SOURCE_DERIVED, self.TITLE_SOURCE_LLM, self.TITLE_SOURCE_USER):
            raise ValueError(f"invalid title source: {source!r}")
        return bool(await self._write(SetSessionTitleSource(session_id=require_id(session_id), source=source)))  # type: ignore[arg-type]

    async def get_session_title(self, session_id: str) -> str | None:
        """Return the session's title, or None (untitled or unknown)."""
        row = await self._query("session_title_row", require_id(session_id))
        return None if row is None else row[0]

    async def get_session_title_source(self, session_id: str) -> str | None:
        """Return the title's provenance ("derived", "llm", "user"), or None when untitled."""
        row = await self._query("session_title_row", require_id(session_id))
        return None if row is None or row[0] is None else row[1]

    async def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        """Return the session titled exactly ``title`` (``get_session`` shape), or None."""
        return await self._query("session_by_title", _title_text(title, "title"))

    async def resolve_session_by_title(self, title: str) -> str | None:
        """Return the id of the newest ``"<title> #<n>"`` session, else of the one titled ``title``, else None."""
        return await self._query("session_id_by_title", _title_text(title, "title"))

    async def get_next_title_in_lineage(self, base_title: str) -> str:
        """Return the title for the next continuation: ``"<base> #<max n + 1>"``, or the bare base if unused.

        A trailing ``" #<n>"`` of ``base_title`` is ignored; the bare base counts as #1.
        """
        return await self._query("next_lineage_title", _title_text(base_title, "base_title"))

    # ------------------------------------------------------------ lineage flags

    async def _set_flag(self, session_id: str, column: LineageFlag, value: float) -> bool:
        command = SetLineageFlag(session_id=require_id(session_id), column=column, value=value)
        return int(await self._write(command)) > 0

    async def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive the whole conversation; returns False when no session matched.

        A conversation is a session with every compression continuation of it
        (the sessions sharing its ``conversation_id``); forks (tool runs,
        /branch, delegates, reset children) are conversations of their own.
        """
        return await self._set_flag(session_id, "archived", 1 if flag_arg(archived, "archived") else 0)

    async def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin the whole conversation; returns False when no session matched."""
        return await self._set_flag(session_id, "pinned", 1 if flag_arg(pinned, "pinned") else 0)

    async def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        """Hide or unhide the whole conversation; returns False when no session matched.

        A hidden session stays readable and resumable by id; only the default
        :meth:`list_sessions_rich` listing leaves it out. Returns True also
        when the flag already had that value.
        """
        return await self._set_flag(session_id, "hidden", 1 if flag_arg(hidden, "hidden") else 0)

    async def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Mark the conversation read now (or unread: ``last_read_at = 0.0``); returns False when no session matched."""
        return await self._set_flag(session_id, "last_read_at", time.time() if read else 0.0)
