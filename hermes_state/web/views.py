"""What the pages show, built from the public API's rows: messages, tool calls, folds, times and money.

The HTML of message bodies comes from :mod:`.markup` (markdown with stored
HTML kept as text, Pygments' escaped highlighting); everything else reaches
the page through the autoescaping templates. This module decides what to
show (which images may be shown inline, what is markdown, code or JSON,
what is folded or cut short) and formats numbers and times.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

from .markup import code_html, json_html, markdown_html
from .outline import is_error

__all__ = [
    "Block",
    "MessageView",
    "Segment",
    "ToolCallView",
    "message_view",
    "segments",
    "snippet_parts",
    "session_href",
    "when",
    "money",
    "count",
]

# A block longer than this (of any role) is folded behind "show all".
FOLD_CHARS = 2000
FOLD_LINES = 40
# What a folded block shows before "show all".
HEAD_CHARS = 800
HEAD_LINES = 12
# What a fold holds at most; the whole text is one click further, on a page of its own.
CUT_CHARS = 100_000
# Roles whose text is markdown; tool output is shown as code (or JSON), anything else as plain text.
MARKDOWN_ROLES = frozenset({"user", "assistant", "system", "developer"})
# Inline images: data: URLs of raster image types only (an SVG could carry links and scripts).
KNOWN_ROLES = frozenset({"user", "assistant", "tool", "system", "developer"})
INLINE_IMAGE_PREFIXES = tuple(f"data:image/{kind};" for kind in ("png", "jpeg", "jpg", "gif", "webp", "bmp", "avif"))


@dataclass
class Block:
    """One piece of a message body: ``kind`` is markdown, code, json, text, image, link or bytes.

    ``html`` is the rendered body (the part a fold holds), ``head_html`` what
    a folded block shows closed; ``cut`` says the fold holds only the first
    ``CUT_CHARS`` characters of ``size``.
    """

    kind: str
    text: str = ""
    folded: bool = False
    size: int = 0
    lines: int = 0
    html: Markup = field(default_factory=Markup)
    head_html: Markup = field(default_factory=Markup)
    cut: bool = False


@dataclass
class ToolCallView:
    name: str
    call_id: str
    arguments: Block


@dataclass
class MessageView:
    id: int
    anchor: str
    role: str
    active: bool
    compacted: bool
    time: str
    iso: str
    blocks: list[Block]
    tool_calls: list[ToolCallView] = field(default_factory=list)
    tool_name: str = ""
    tool_call_id: str = ""
    reasoning: Block | None = None
    token_count: int | None = None
    finish_reason: str = ""
    raw_href: str = ""
    full_href: str = ""
    timestamp: float | None = None
    error: bool = False
    open: bool = False  # its folds start open (a search hit landed here)

    @property
    def role_class(self) -> str:
        """A CSS class for the role: only the roles the stylesheet knows (a stored role is any text)."""
        return f"role-{self.role}" if self.role in KNOWN_ROLES else "role-other"


@dataclass
class Segment:
    """A run of messages shown together: live rows, or inactive ones (compacted or rewound) folded."""

    kind: str  # "live", "compacted" or "dropped"
    messages: list[MessageView]
    boundary: bool = False  # live rows that start right after compacted ones


def when(stamp: Any) -> tuple[str, str]:
    """``(YYYY-MM-DD HH:MM:SS UTC, ISO 8601)`` for epoch seconds; ``("-", "")`` for none or junk."""
    try:
        moment = dt.datetime.fromtimestamp(float(stamp), tz=dt.timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return "-", ""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC"), moment.isoformat()


def money(value: Any) -> str:
    """US dollars for people: ``$0.0123``, ``$12.34``; ``-`` when unknown."""
    if value is None:
        return "-"
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return "-"
    if amount == 0:
        return "$0"
    return f"${amount:,.4f}" if abs(amount) < 1 else f"${amount:,.2f}"


def count(value: Any) -> str:
    """An integer with thousands separators; ``-`` when unknown."""
    if value is None:
        return "-"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError, OverflowError):
        return str(value)


def session_href(session_id: str) -> str:
    """The page of a session; every character of the id that means something in a URL is escaped."""
    return "/sessions/" + quote(session_id, safe="")


def _html(kind: str, text: str) -> Markup:
    if kind == "markdown":
        return markdown_html(text)
    if kind == "json":
        return json_html(text)
    if kind == "code":
        return code_html(text)
    return Markup('<div class="text" dir="auto">') + escape(text) + Markup("</div>")


def _text_block(text: str, kind: str = "text", *, fold: bool = True) -> Block:
    """A block of ``kind``; folded (head shown, at most ``CUT_CHARS`` inside) when long and ``fold``."""
    lines = text.count("\n") + 1
    long = len(text) > FOLD_CHARS or lines > FOLD_LINES
    if not (fold and long):
        if kind == "markdown" and len(text) > CUT_CHARS:
            kind = "text"  # a whole huge paste (its own page): plain text, markdown would take seconds
        return Block(kind, text=text, size=len(text), lines=lines, html=_html(kind, text))
    head = "\n".join(text[:HEAD_CHARS].split("\n")[:HEAD_LINES])
    cut = len(text) > CUT_CHARS
    return Block(kind, text=text, folded=True, size=len(text), lines=lines, cut=cut,
                 html=_html(kind, text[:CUT_CHARS] if cut else text), head_html=_html(kind, head))


def _tool_text(text: str, fold: bool) -> Block:
    """Tool output: pretty JSON when it parses as a JSON object or array, else monospace as it came."""
    if text.lstrip()[:1] in ("{", "[") and len(text) <= CUT_CHARS:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(value, (dict, list)):
                return _text_block(pretty_json(value), "json", fold=fold)
    return _text_block(text, "code", fold=fold)


def pretty_json(value: Any) -> str:
    """Indented JSON (non-ASCII kept), or the value's text when it is not JSON-encodable."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _part_blocks(part: Any, kind_of_text: str, fold: bool) -> list[Block]:
    if not isinstance(part, Mapping):
        return [_text_block(pretty_json(part), "json", fold=fold)]
    kind = part.get("type")
    if isinstance(part.get("text"), str):
        return [_text_block(part["text"], kind_of_text, fold=fold)]
    if kind in ("image_url", "input_image", "image"):
        raw = part.get("image_url")
        url = raw.get("url") if isinstance(raw, Mapping) else raw
        if isinstance(url, str) and url.lower().startswith(INLINE_IMAGE_PREFIXES):
            return [Block("image", text=url, size=len(url))]
        # Any other URL would be a request to another host: shown as text, never fetched.
        return [Block("link", text=str(url if url is not None else part))]
    return [_text_block(pretty_json(part), "json", fold=fold)]


def text_kind(role: str) -> str:
    """How a role's text is shown: markdown for people and models, code for tool output, else plain text."""
    return "markdown" if role in MARKDOWN_ROLES else "code" if role == "tool" else "text"


def content_blocks(content: Any, *, role: str = "", fold: bool = True) -> list[Block]:
    """The body of a message: text by its role's kind, multimodal parts one by one, anything else as JSON."""
    kind = text_kind(role)
    if content is None:
        return []
    if isinstance(content, str):
        if not content:
            return []
        return [_tool_text(content, fold) if kind == "code" else _text_block(content, kind, fold=fold)]
    if isinstance(content, (bytes, bytearray, memoryview)):
        data = bytes(content)
        return [Block("bytes", text=data[:64].hex(" "), size=len(data))]
    if isinstance(content, list):
        return [block for part in content for block in _part_blocks(part, kind, fold)]
    return [_text_block(pretty_json(content), "json", fold=fold)]


def _arguments(raw: Any) -> Block:
    """Tool-call arguments pretty-printed when they are JSON (they usually arrive as a JSON string)."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            return _text_block(raw, "json", fold=True)
    return _text_block(pretty_json(value), "json", fold=True)


def tool_call_views(calls: Any) -> list[ToolCallView]:
    """Each OpenAI-style tool call (``{"id", "function": {"name", "arguments"}}``) by name and arguments."""
    if not isinstance(calls, list):
        return [] if calls is None else [ToolCallView("?", "", _text_block(pretty_json(calls), "json", fold=True))]
    views = []
    for call in calls:
        if not isinstance(call, Mapping):
            views.append(ToolCallView("?", "", _text_block(pretty_json(call), "json", fold=True)))
            continue
        nested = call.get("function")
        function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else call
        name = function.get("name") or call.get("name") or "?"
        views.append(ToolCallView(str(name), str(call.get("id") or ""), _arguments(function.get("arguments"))))
    return views


def _reasoning(row: Mapping[str, Any]) -> Block | None:
    parts = [row.get(key) for key in ("reasoning", "reasoning_content")]
    texts = [part for part in parts if isinstance(part, str) and part.strip()]
    if not texts:
        return None
    # Both columns often hold the same text; show it once.
    return _text_block("\n\n".join(dict.fromkeys(texts)), "markdown")


def raw_href(session_id: str, message: int) -> str:
    """The JSON API's URL of one message (the row as the store returns it)."""
    return f"/api{session_href(session_id)}?after={max(message - 1, 0)}&limit=1"


def message_view(row: Mapping[str, Any], *, fold: bool = True) -> MessageView:
    """Everything the transcript shows about one ``get_messages`` row (``fold=False``: every block whole)."""
    role = str(row.get("role") or "")
    shown, iso = when(row.get("timestamp"))
    token_count = row.get("token_count")
    session_id = str(row.get("session_id") or "")
    stamp = row.get("timestamp")
    return MessageView(
        id=int(row["id"]),
        anchor=f"m{int(row['id'])}",
        role=role,
        active=bool(row.get("active", 1)),
        compacted=bool(row.get("compacted", 0)),
        time=shown,
        iso=iso,
        blocks=content_blocks(row.get("content"), role=role, fold=fold),
        tool_calls=tool_call_views(row.get("tool_calls")),
        tool_name=str(row.get("tool_name") or ""),
        tool_call_id=str(row.get("tool_call_id") or ""),
        reasoning=_reasoning(row),
        token_count=token_count if isinstance(token_count, int) else None,
        finish_reason=str(row.get("finish_reason") or ""),
        raw_href=raw_href(session_id, int(row["id"])),
        full_href=f"{session_href(session_id)}?full={int(row['id'])}",
        timestamp=float(stamp) if isinstance(stamp, (int, float)) else None,
        error=is_error(row),
    )


def segments(views: Iterable[MessageView]) -> list[Segment]:
    """Consecutive rows grouped: live ones, compacted ones (archived by compaction), dropped ones (rewound)."""
    out: list[Segment] = []
    for view in views:
        kind = "live" if view.active else ("compacted" if view.compacted else "dropped")
        if out and out[-1].kind == kind:
            out[-1].messages.append(view)
            continue
        boundary = kind == "live" and bool(out) and out[-1].kind == "compacted"
        out.append(Segment(kind, [view], boundary=boundary))
    return out


SNIPPET_OPEN, SNIPPET_CLOSE = ">>>", "<<<"


def snippet_parts(snippet: Any) -> list[dict[str, Any]]:
    """A search snippet split at its ``>>>match<<<`` markers: ``[{"text", "hit"}]`` for the page to mark up."""
    rest = snippet if isinstance(snippet, str) else ""
    parts: list[dict[str, Any]] = []
    while rest:
        start = rest.find(SNIPPET_OPEN)
        end = rest.find(SNIPPET_CLOSE, start + len(SNIPPET_OPEN)) if start >= 0 else -1
        if end < 0:
            parts.append({"text": rest, "hit": False})
            break
        if start:
            parts.append({"text": rest[:start], "hit": False})
        parts.append({"text": rest[start + len(SNIPPET_OPEN):end], "hit": True})
        rest = rest[end + len(SNIPPET_CLOSE):]
    return parts
