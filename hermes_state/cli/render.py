"""Messages rendered for a person: readable tool calls, text of multimodal content, one-line previews."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["content_text", "tool_call_text", "one_line"]


def content_text(content: Any) -> str:
    """Message content as text: strings as they are, multimodal parts by their text, images as ``[image]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray)):
        return f"[{len(content)} bytes]"
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                else:
                    parts.append(f"[{part.get('type') or 'part'}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _argument_text(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))


def tool_call_text(call: Any) -> str:
    """``name(key="value", ...)`` for an OpenAI-style tool call; arguments that are not a JSON object stay as given."""
    if not isinstance(call, dict):
        return str(call)
    nested = call.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else call
    name = function.get("name") or call.get("name") or "?"
    raw = function.get("arguments", call.get("arguments"))
    arguments: Any = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return f"{name}({raw})"
    if isinstance(arguments, dict):
        inner = ", ".join(f"{key}={_argument_text(value)}" for key, value in arguments.items())
    elif arguments is None:
        inner = ""
    else:
        inner = _argument_text(arguments)
    return f"{name}({inner})"


def one_line(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(1, width - 1)] + "…"
