"""A transcript's landmarks: which rows are errors, the outline of tool calls and errors, and search inside one session.

Search inside a session is a plain case-insensitive substring match over the
session's rows, read in keyset pages through ``get_messages``: whatever was
stored is found as typed (``C#``, URLs, paths), with no tokenizer in between.
It reads at most ``SCAN_ROWS`` rows and reports when it stopped early.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OutlineEntry", "SessionHits", "is_error", "outline", "search_session", "SCAN_ROWS", "HIT_LIMIT"]

SCAN_ROWS = 20_000
SCAN_CHUNK = 500
HIT_LIMIT = 200
SNIPPET_SIDE = 60
_ERROR_START = re.compile(r"\s*(?:error|traceback|exception|fatal|panic)\b", re.IGNORECASE)
_FAILED_FINISH = frozenset({"error", "content_filter"})


def _json_error(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    if value.get("error") not in (None, "", False):
        return True
    for key in ("exit_code", "returncode", "exitCode"):
        code = value.get(key)
        if isinstance(code, int) and not isinstance(code, bool) and code != 0:
            return True
    status = value.get("status")
    return isinstance(status, int) and not isinstance(status, bool) and status >= 400


def is_error(row: Mapping[str, Any]) -> bool:
    """Whether a row reports a failure: a tool result that starts with an error or says one in JSON, or a failed finish."""
    if str(row.get("finish_reason") or "") in _FAILED_FINISH:
        return True
    content = row.get("content")
    if row.get("role") != "tool" or not isinstance(content, str):
        return False
    if _ERROR_START.match(content[:200]):
        return True
    if content.lstrip()[:1] == "{" and len(content) < 100_000:
        try:
            return _json_error(json.loads(content))
        except (ValueError, RecursionError):
            return False
    return False


@dataclass
class OutlineEntry:
    anchor: str
    id: int
    kind: str  # "call" or "error"
    label: str


def outline(views: Sequence[Any]) -> list[OutlineEntry]:
    """The page's tool calls (by name) and error rows, in order, for the outline beside the transcript."""
    entries: list[OutlineEntry] = []
    for view in views:
        for call in view.tool_calls:
            entries.append(OutlineEntry(view.anchor, view.id, "call", call.name))
        if view.error:
            label = f"{view.tool_name or view.role} failed" if view.role == "tool" else f"{view.role}: {view.finish_reason}"
            entries.append(OutlineEntry(view.anchor, view.id, "error", label))
    return entries


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False, default=str)


def _snippet(text: str, start: int, length: int) -> list[dict[str, Any]]:
    left = max(0, start - SNIPPET_SIDE)
    right = min(len(text), start + length + SNIPPET_SIDE)
    return [
        {"text": ("..." if left else "") + text[left:start], "hit": False},
        {"text": text[start:start + length], "hit": True},
        {"text": text[start + length:right] + ("..." if right < len(text) else ""), "hit": False},
    ]


@dataclass
class SessionHits:
    query: str
    hits: list[dict[str, Any]] = field(default_factory=list)
    scanned: int = 0
    complete: bool = True  # every row was read and every hit kept


async def search_session(db: Any, session_id: str, query: str) -> SessionHits:
    """Rows of ``session_id`` whose content or tool calls contain ``query`` (any case), oldest first."""
    found = SessionHits(query)
    needle = query.casefold()
    after = 0
    while found.scanned < SCAN_ROWS:
        rows = await db.get_messages(session_id, include_inactive=True, limit=SCAN_CHUNK, after_id=after)
        for row in rows:
            text = _text(row.get("content"))
            calls = row.get("tool_calls")
            if calls:
                text += "\n" + _text(calls)
            at = text.casefold().find(needle)
            if at < 0:
                continue
            if len(found.hits) == HIT_LIMIT:
                found.complete = False
                return found
            # casefold can change lengths (ß -> ss); the snippet then marks the nearest span.
            found.hits.append({"id": row["id"], "role": row.get("role") or "", "active": bool(row.get("active", 1)),
                               "parts": _snippet(text, at, len(query))})
        found.scanned += len(rows)
        if len(rows) < SCAN_CHUNK:
            return found
        after = rows[-1]["id"]
    found.complete = False
    return found
