"""Pure helpers both backends' listing queries share: previews, skill-turn labels, LIKE escaping.

Nothing here touches a database: the backends select the raw excerpt (or the
stored text) and these functions shape it the same way on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .encoding import JSON_CONTENT_PREFIX, decode_content

__all__ = [
    "structured_text",
    "context_text",
    "PREVIEW_HEAD",
    "PREVIEW_MAX",
    "PREVIEW_SKILL_WINDOW",
    "SKILL_INVOCATION_PREFIX",
    "describe_skill_invocation",
    "escape_like",
    "parse_model_config",
    "project_tips",
    "shape_preview",
    "text_preview",
]


def escape_like(text: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for a ``LIKE ... ESCAPE '\\'`` pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# Literals of the persisted skill-invocation format (shared with the agent runtime).
SKILL_INVOCATION_PREFIX = "[IMPORTANT: The user has invoked the "
_SINGLE_SKILL_MARKER = "The full skill content is loaded below.]"
_SINGLE_SKILL_INSTRUCTION = "The user has provided the following instruction alongside the skill invocation: "
_RUNTIME_NOTE = "\n\n[Runtime note:"
_BUNDLE_MARKER = " skill bundle,"
_BUNDLE_USER_INSTRUCTION = "\nUser instruction: "
_BUNDLE_FIRST_SKILL = "\n\n[Loaded as part of the "
SKILL_EXCERPT_JOINT = "\x1e"
_SKILL_NAME = re.compile(re.escape(SKILL_INVOCATION_PREFIX) + r'"([^"]*)"')

PREVIEW_HEAD = 63
PREVIEW_SKILL_WINDOW = 400
PREVIEW_MAX = 60
RECENT_PREVIEW_MAX = 80


def _between(text: str, start: int, marker: str, end_marker: str) -> str | None:
    """Stripped text after ``marker`` (found at ``start``) up to ``end_marker``; None when empty or absent."""
    if start < 0:
        return None
    tail = text[start + len(marker):]
    end = tail.find(end_marker)
    return (tail if end < 0 else tail[:end]).strip() or None


def _skill_instruction(text: str) -> str | None:
    """The user's own words inside an expanded skill turn, if it carries any."""
    if _BUNDLE_MARKER in text:
        return _between(text, text.find(_BUNDLE_USER_INSTRUCTION), _BUNDLE_USER_INSTRUCTION, _BUNDLE_FIRST_SKILL)
    if _SINGLE_SKILL_MARKER in text:
        return _between(text, text.rfind(_SINGLE_SKILL_INSTRUCTION), _SINGLE_SKILL_INSTRUCTION, _RUNTIME_NOTE)
    return None


def describe_skill_invocation(content: Any, separator: str = " — ") -> str | None:
    """Render an expanded skill turn as the slash command the user typed (None for other text)."""
    if not isinstance(content, str) or not content.startswith(SKILL_INVOCATION_PREFIX):
        return None
    found = _SKILL_NAME.match(content)
    name = found.group(1).strip() if found else ""
    label = name if name.startswith("/") else f"/{name}"
    instruction = _skill_instruction(content)
    if instruction:
        words = " ".join(instruction.split(SKILL_EXCERPT_JOINT)[0].split())
        if words:
            return f"{label}{separator}{words}" if name else words
    return label if name else None


def _multimodal_text(value: Any) -> str | None:
    """Text parts of decoded structured content joined by spaces; None when there are none."""
    if not isinstance(value, list):
        return None
    parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
    joined = " ".join(p for p in parts if isinstance(p, str) and p).strip()
    return joined or None


def structured_text(stored: Any) -> str | None:
    """The text parts of stored structured content (``"\\x00json:[...]"``) joined by spaces;
    None for plain text and for structured content without text parts."""
    if isinstance(stored, str) and stored.startswith(JSON_CONTENT_PREFIX):
        return _multimodal_text(decode_content(stored))
    return None


def shape_preview(raw: Any) -> str:
    """Turn the preview excerpt selected in SQL into the short text listings show."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    text = str(raw or "")
    if text.startswith(JSON_CONTENT_PREFIX):
        # Structured (multimodal) content: its text parts, or a placeholder when
        # there are none or the excerpt cut the JSON short (inline images).
        # A decoded string is a user's text that happened to begin with the marker.
        value = decode_content(text)
        if isinstance(value, str) and value != text:
            text = value
        else:
            text = _multimodal_text(value) or "[multimodal content]"
        text = " ".join(text.split())[:PREVIEW_HEAD]
    text = text.strip()
    if not text:
        return ""
    described = describe_skill_invocation(text)
    text = described if described is not None else text.split(SKILL_EXCERPT_JOINT)[0]
    return text[:PREVIEW_MAX] + "..." if len(text) > PREVIEW_MAX else text


def text_preview(content: Any, limit: int = RECENT_PREVIEW_MAX) -> str:
    """One-line preview of decoded message content (skill turns described), at most ``limit`` chars."""
    if isinstance(content, list):
        text = _multimodal_text(content) or "[multimodal content]"
    elif isinstance(content, str):
        text = describe_skill_invocation(content) or content
    else:
        text = ""
    text = " ".join(text.split())
    return text[: limit - 3] + "..." if len(text) > limit else text


def parse_model_config(text: Any) -> dict[str, Any]:
    """Tolerant parse of a stored ``model_config``: anything but a JSON object reads as ``{}``."""
    if not isinstance(text, str) or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


# Keys a listed compression root takes from its live tip.
TIP_KEYS = (
    "id", "ended_at", "end_reason", "message_count", "tool_call_count", "title", "last_active",
    "preview", "model", "system_prompt", "cwd", "git_branch", "git_repo_root",
)


def project_tips(
    rows: list[dict[str, Any]], tips: dict[str, str], tip_rows: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Show each listed compression root (``tips``: root id -> live tip id) with its tip's fields.

    A projected row keeps the root's other columns and names it in ``_lineage_root_id``.
    """
    projected = []
    for row in rows:
        tip_row = tip_rows.get(tips.get(row["id"], ""))
        if tip_row is None:
            projected.append(row)
            continue
        merged = dict(row)
        for key in TIP_KEYS:
            if key in tip_row:
                merged[key] = tip_row[key]
        merged["_lineage_root_id"] = row["id"]
        projected.append(merged)
    return projected


# How much of a neighbouring message a search hit's context window shows.
CONTEXT_CHARS = 200


def context_text(content: Any) -> str:
    """Return the readable text of stored ``content`` for a search context window, cut to ``CONTEXT_CHARS``."""
    value = decode_content(content)
    if isinstance(value, list):
        texts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        text = " ".join(t for t in texts if isinstance(t, str) and t).strip()
        return (text or "[multimodal content]")[:CONTEXT_CHARS]
    if isinstance(value, str):
        return value[:CONTEXT_CHARS]
    return ""
