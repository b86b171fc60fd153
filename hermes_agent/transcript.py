"""Pure helpers over the in-memory message list: persistence markers, wire copies, tail repair.

The live list holds OpenAI-style dicts. Keys starting with ``_`` are private
to the agent (the persistence marker, scaffolding flags, resume row ids) and
never reach a provider or the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "EPHEMERAL",
    "INTERRUPTED_TEXT",
    "PERSISTED",
    "RESULT_UNAVAILABLE",
    "append_kwargs",
    "cancelled_tool_message",
    "close_incomplete_tail",
    "content_text",
    "is_persisted",
    "missing_tool_results",
    "tool_message",
    "wire_messages",
]

# Set on a dict once its row is committed; later flushes skip it.
PERSISTED = "_db_persisted"
# Set on scaffolding that must never be written (it lives for one request only).
EPHEMERAL = "_ephemeral"

INTERRUPTED_TEXT = "Operation interrupted."
RESULT_UNAVAILABLE = "[Result unavailable — see context summary above]"

_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def is_persisted(message: dict[str, Any]) -> bool:
    """True once the dict's row is durable."""
    return bool(message.get(PERSISTED))


def content_text(content: Any) -> Any:
    """Return content the store keeps as text: multimodal parts flattened, images as ``[screenshot]``."""
    if not isinstance(content, list):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, dict):
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif kind in ("image_url", "image", "input_image"):
                parts.append("[screenshot]")
        elif isinstance(part, str):
            parts.append(part)
    return "\n".join(parts)


def append_kwargs(message: dict[str, Any]) -> dict[str, Any]:
    """Return the ``append_message`` keyword arguments for one live dict (without session_id)."""
    role = message.get("role")
    content = content_text(message.get("content"))
    kwargs: dict[str, Any] = {"role": role, "content": content}
    tool_name = message.get("tool_name") or (message.get("name") if role == "tool" else None)
    if tool_name:
        kwargs["tool_name"] = tool_name
    for key in ("tool_calls", "tool_call_id", "timestamp", "display_kind", "display_metadata"):
        if message.get(key):
            kwargs[key] = message[key]
    api_content = message.get("api_content")
    if api_content and api_content != content:
        kwargs["api_content"] = api_content
    if role == "assistant":
        for key in ("finish_reason", "reasoning", "reasoning_content", "reasoning_details",
                    "codex_reasoning_items", "codex_message_items"):
            if message.get(key) is not None:
                kwargs[key] = message[key]
    return kwargs


def tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    """Return a tool-result dict for ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "name": name, "tool_name": name, "content": content}


def cancelled_tool_message(call: dict[str, Any], reason: str) -> dict[str, Any]:
    """Return the synthetic result of a call that never produced one.

    ``reason`` is ``"skipped"`` (not started), ``"killed"`` (cancelled while
    running) or ``"later"`` (a later segment of an interrupted batch).
    """
    name = (call.get("function") or {}).get("name") or "tool"
    if reason == "killed":
        text = f"[Tool execution cancelled — {name} was cancelled before a result was available]"
    elif reason == "skipped":
        text = f"[Tool execution cancelled — {name} was skipped due to user interrupt]"
    else:
        text = "[Tool execution cancelled — call was skipped due to user interrupt]"
    return tool_message(call.get("id") or "", name, text)


def missing_tool_results(messages: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """Find the last assistant message with tool calls and return ``(its index, calls without a result)``.

    Returns ``(-1, [])`` when no assistant message asked for tools.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            answered = {m.get("tool_call_id") for m in messages[index + 1:] if m.get("role") == "tool"}
            return index, [c for c in message["tool_calls"] if c.get("id") not in answered]
        if message.get("role") == "user":
            break
    return -1, []


def close_incomplete_tail(messages: list[dict[str, Any]], final_response: str | None, *, interrupted: bool) -> int:
    """Close a protocol tail left open by an interruption or failure; returns how many dicts were added.

    Calls without a result get a synthetic cancelled result. After an
    interruption, a trailing tool row gets an assistant row
    (``final_response`` or "Operation interrupted."). User and assistant
    tails are left alone.
    """
    added = 0
    _, missing = missing_tool_results(messages)
    for call in missing:
        messages.append(cancelled_tool_message(call, "later"))
        added += 1
    if interrupted and messages and messages[-1].get("role") == "tool":
        text = (final_response or "").strip() or INTERRUPTED_TEXT
        messages.append({"role": "assistant", "content": text})
        added += 1
    return added


def _wire_copy(message: dict[str, Any]) -> dict[str, Any]:
    out = {key: message[key] for key in _WIRE_KEYS if key in message and not key.startswith("_")}
    if "api_content" in message and message.get("api_content"):
        out["content"] = message["api_content"]
    if out.get("role") == "tool":
        out.pop("name", None)
    if out.get("role") == "assistant" and not out.get("tool_calls"):
        out.pop("tool_calls", None)
    if "content" not in out:
        out["content"] = None if out.get("role") == "assistant" else ""
    return out


def wire_messages(system_prompt: str | None, messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the per-request copy: system prompt first, private keys stripped, protocol made valid.

    Ephemeral flags are honoured (the dict is sent but never stored); orphan
    tool results are dropped; a call without a result gets the stub
    "[Result unavailable — see context summary above]". Nothing here is persisted.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    pending: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                continue
            pending.pop(call_id)
            out.append(_wire_copy(message))
            continue
        _flush_stubs(out, pending)
        if role == "system":
            continue
        copy = _wire_copy(message)
        out.append(copy)
        if role == "assistant":
            for call in copy.get("tool_calls") or []:
                pending[call.get("id")] = (call.get("function") or {}).get("name") or ""
    _flush_stubs(out, pending)
    return out


def _flush_stubs(out: list[dict[str, Any]], pending: dict[str, str]) -> None:
    for call_id in list(pending):
        out.append({"role": "tool", "tool_call_id": call_id, "content": RESULT_UNAVAILABLE})
    pending.clear()


def estimate_tokens(wire: list[dict[str, Any]]) -> int:
    """A cheap context-size estimate: serialized characters / 4."""
    return sum(len(json.dumps(m, ensure_ascii=False, default=str)) for m in wire) // 4
