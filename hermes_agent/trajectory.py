"""ShareGPT-style JSONL trajectories: an export of each turn, separate from ``state.db``.

One record per turn: ``trajectory_samples.jsonl`` when the turn completed,
``failed_trajectories.jsonl`` otherwise, in a directory the host chooses. A
record is written with one ``write`` on an ``O_APPEND`` descriptor from a
worker thread, behind a per-file lock, so it is whole even when the turn is
cancelled (the agent awaits it inside its shielded finalizer).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from .shielding import finish_owned

__all__ = [
    "FAILED_FILE",
    "SAMPLES_FILE",
    "append_record",
    "to_sharegpt",
    "trajectory_record",
]

SAMPLES_FILE = "trajectory_samples.jsonl"
FAILED_FILE = "failed_trajectories.jsonl"

_SYSTEM_TEMPLATE = (
    "You are a function-calling AI model. You are given function signatures within <tools> </tools> "
    "XML tags. You may call one or more functions to assist with the user query. For each call, return "
    "a JSON object with the function name and arguments within <tool_call> </tool_call> XML tags. "
    "Tool results arrive within <tool_response> </tool_response> XML tags.\n<tools>\n{tools}\n</tools>"
)
_SCRATCHPAD = re.compile(r"</?REASONING_SCRATCHPAD>")
_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _maybe_json(text: Any) -> Any:
    if isinstance(text, str) and text.strip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _gpt_value(message: dict[str, Any]) -> str:
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    content = message.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    if "<REASONING_SCRATCHPAD>" in content:
        content = _SCRATCHPAD.sub(lambda m: m.group(0).replace("REASONING_SCRATCHPAD", "think"), content)
    value = f"<think>\n{reasoning}\n</think>\n" if reasoning else "<think>\n</think>\n"
    value += content
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = _maybe_json(function.get("arguments") or "{}")
        payload = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
        value += f"\n<tool_call>\n{payload}\n</tool_call>"
    return value


def to_sharegpt(messages: list[dict[str, Any]], tool_schemas: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Convert a message list to ``[{from, value}]`` entries (system, human, gpt, tool).

    All results following one assistant message merge into one ``tool``
    entry. Every message of the list is kept, including resumed history.
    """
    tools = [schema.get("function", schema) for schema in tool_schemas]
    entries: list[dict[str, str]] = [
        {"from": "system", "value": _SYSTEM_TEMPLATE.format(tools=json.dumps(tools, ensure_ascii=False))}
    ]
    for message in messages:
        role = message.get("role")
        if role == "user":
            content = message.get("content")
            entries.append({"from": "human", "value": content if isinstance(content, str) else json.dumps(content)})
        elif role == "assistant":
            entries.append({"from": "gpt", "value": _gpt_value(message)})
        elif role == "tool":
            payload = json.dumps(
                {
                    "tool_call_id": message.get("tool_call_id"),
                    "name": message.get("tool_name") or message.get("name"),
                    "content": _maybe_json(message.get("content")),
                },
                ensure_ascii=False,
            )
            block = f"<tool_response>\n{payload}\n</tool_response>"
            if entries[-1]["from"] == "tool":
                entries[-1]["value"] += "\n" + block
            else:
                entries.append({"from": "tool", "value": block})
    return entries


def trajectory_record(
    messages: list[dict[str, Any]], tool_schemas: list[dict[str, Any]], *, model: str, completed: bool, session_id: str
) -> dict[str, Any]:
    """Return one JSONL record: ``conversations``, ``timestamp`` (local ISO-8601), ``model``, ``completed``, ``session_id``."""
    return {
        "conversations": to_sharegpt(messages, tool_schemas),
        "timestamp": datetime.now().isoformat(),
        "model": model,
        "completed": bool(completed),
        "session_id": session_id,
    }


def _append_line(path: Path, line: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    with _file_locks_guard:
        lock = _file_locks.setdefault(key, threading.Lock())
    with lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)


async def append_record(directory: Path, record: dict[str, Any]) -> Path:
    """Append ``record`` to the samples or failed file under ``directory``; returns the file path.

    The write runs in a thread and is awaited through repeated cancellation,
    so a record is never half-written; a cancellation is re-raised afterwards.
    """
    path = Path(directory) / (SAMPLES_FILE if record.get("completed") else FAILED_FILE)
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    await finish_owned(asyncio.to_thread(_append_line, path, line))
    return path
