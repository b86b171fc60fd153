"""What every adapter does with its borrowed store: one session id, rows in, rows out.

Each framework object (an item, a chat message) becomes one ``messages`` row:
readable text in ``content`` (so ``search_messages`` finds it), OpenAI-shaped
``tool_calls``/``tool_call_id`` where they apply, and the exact object under
an adapter-specific key of ``display_metadata`` so it reads back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SessionNotFoundError, StoreClosedError
from ..facade import require_id
from ..store import SessionDB

__all__ = ["SessionBinding", "exact_payload", "parts_text"]


class SessionBinding:
    """One session of a borrowed store; creates the session row before its first append."""

    def __init__(self, db: Any, session_id: Any, source: Any) -> None:
        if not isinstance(db, SessionDB):
            raise TypeError(f"session_db must be a hermes_state.SessionDB, not {type(db).__name__}")
        self.db: SessionDB = db
        self.session_id: str = require_id(session_id)
        self.source: str = require_id(source, "source")
        self._known = False

    async def append(self, rows: list[dict[str, Any]]) -> None:
        """Append message dicts in one transaction, creating the session first if needed."""
        if not rows:
            if self.db.closed:  # nothing to write is no reason to answer a closed store with success
                raise StoreClosedError()
            return
        if not self._known:
            await self.db.ensure_session(self.session_id, self.source)
            self._known = True
        try:
            await self.db.append_messages_batch(self.session_id, rows)
        except SessionNotFoundError:
            # Someone deleted the session since we created it: start it again.
            await self.db.ensure_session(self.session_id, self.source)
            await self.db.append_messages_batch(self.session_id, rows)

    async def rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The active rows, oldest first; with ``limit`` only the newest ``limit`` of them."""
        if limit is None:
            return await self.db.get_messages(self.session_id)
        return await self.db.get_messages(self.session_id, limit=limit, latest=True)


def exact_payload(row: Mapping[str, Any], key: str) -> Any:
    """The object an adapter kept under ``display_metadata[key]``, or None for a foreign row."""
    meta = row.get("display_metadata")
    return meta.get(key) if isinstance(meta, dict) else None


def parts_text(value: Any) -> str:
    """Readable text of a content value: a string, or the text of a list of content parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return json.dumps(value, ensure_ascii=False, default=str)
