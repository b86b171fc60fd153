"""How message values become column values, and back.

These rules are part of the on-disk format shared with async-hermes-agent:
structured content is stored as ``"\\x00json:" + json.dumps(value)``, empty
tool-call lists become NULL, lone UTF-16 surrogates become U+FFFD, and the
reasoning sidecars are stored only for assistant rows in the dict writers.
Two deliberate departures keep every value's type: numbers and booleans
use the JSON form too (the reference stored them bare and read them back as
text), and a string that itself begins with the marker is stored as the
marker's JSON form of that string. Both read back correctly with the
reference's own decoder.

Everything here runs in the caller's task before a command exists, so a value
that cannot be stored fails at the call site and never reaches a transaction.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .commands.messages import ContentKind, ContentValue, MessageRow
from .limits import NOT_JSON, int64_arg, json_text, parse_json_text

__all__ = [
    "JSON_CONTENT_PREFIX",
    "prompt_hash",
    "hashed_prompt",
    "scrub_surrogates",
    "encode_content",
    "decode_content",
    "split_content",
    "join_content",
    "encode_tool_calls",
    "stored_tool_call_count",
    "decode_tool_calls",
    "encode_display_metadata",
    "decode_display_metadata",
    "coerce_timestamp",
    "encode_message_args",
    "encode_text_turn",
    "encode_message_dicts",
    "decode_message_row",
]

JSON_CONTENT_PREFIX = "\x00json:"
_SURROGATES = re.compile("[\ud800-\udfff]")

# Keys a dict writer reads from each message; anything else is ignored.
_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items")


def prompt_hash(prompt: str) -> str:
    """Lower-case hex SHA-256 of the prompt's UTF-8 bytes (the de-duplication key)."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()


def hashed_prompt(prompt: str | None) -> str | None:
    """The de-duplication key of ``prompt``, or None for no prompt."""
    return None if prompt is None else prompt_hash(prompt)


def scrub_surrogates(text: str) -> str:
    """Replace lone UTF-16 surrogates (invalid in UTF-8) with U+FFFD."""
    if text.isascii():  # a flag CPython keeps on every str: no encoding pass needed
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)


def _opt_str(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str or None, not {type(value).__name__}")
    return scrub_surrogates(value)


def _opt_int(value: Any, field: str) -> int | None:
    return None if value is None else int64_arg(value, field)


def _platform_id(value: Any) -> str | None:
    # Platforms hand out numeric ids too; they are stored as text.
    if value is None:
        return None
    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"platform_message_id must be a str, int or None, not {type(value).__name__}")


def encode_content(value: Any) -> ContentValue:
    """Encode message content for the ``content`` column; returns ``str``, ``bytes`` or None.

    Every JSON value comes back from :func:`decode_content` exactly as given,
    with its type:

    * ``str`` is stored as-is (lone surrogates become U+FFFD), except that a
      string beginning with the structured-content marker is stored in the
      marker's JSON form, so it reads back as the same string (also for
      readers that only know the reference format);
    * ``None`` is NULL; ``bytes`` (or a bytearray/memoryview) is a BLOB;
    * ``bool``, ``int``, ``float``, ``list`` and ``dict`` are stored as
      ``"\\x00json:" + json.dumps(value)``.

    Raises ``TypeError`` for a value JSON cannot represent (a tuple, a set,
    non-str keys, an object) and ``ValueError`` for NaN/infinities, integers
    outside the signed 64-bit range or nesting deeper than
    :data:`~hermes_state.limits.MAX_JSON_DEPTH`, naming ``content`` and the
    path to the offending part.
    """
    if isinstance(value, str):
        text = scrub_surrogates(value)
        return JSON_CONTENT_PREFIX + json.dumps(text) if text.startswith(JSON_CONTENT_PREFIX) else text
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return JSON_CONTENT_PREFIX + json_text(value, "content")


def decode_content(value: Any) -> Any:
    """Reverse :func:`encode_content`; a marker followed by invalid JSON returns the raw string."""
    if isinstance(value, str) and value.startswith(JSON_CONTENT_PREFIX):
        try:
            return json.loads(value[len(JSON_CONTENT_PREFIX):])
        except (ValueError, RecursionError):
            return value
    return value


def split_content(stored: ContentValue) -> tuple[str | bytes | None, ContentKind | None]:
    """Split a stored ``content`` value into ``(payload, kind)`` for a backend with a kind column.

    ``kind`` is ``"json"`` (payload is JSON text), ``"text"`` (a plain
    string), ``"bytes"``, or None for NULL content. Lossless for anything
    :func:`encode_content` produced: a ``"text"`` payload never starts with
    the marker. :func:`join_content` is the inverse.
    """
    if stored is None:
        return None, None
    if isinstance(stored, bytes):
        return stored, "bytes"
    if stored.startswith(JSON_CONTENT_PREFIX):
        return stored[len(JSON_CONTENT_PREFIX):], "json"
    return stored, "text"


def join_content(payload: str | bytes | None, kind: ContentKind | None) -> ContentValue:
    """Rebuild the stored ``content`` value from :func:`split_content`'s ``(payload, kind)``."""
    if payload is None:
        return None
    if kind == "json":
        return JSON_CONTENT_PREFIX + str(payload)
    return payload


def _tool_calls_value(value: Any) -> Any:
    """A string parsed as JSON (unparsable means none), anything else as it is."""
    if isinstance(value, str):
        value = parse_json_text(value, "tool_calls")
        if value is NOT_JSON:
            return []
    return value


def _tool_call_count(value: Any) -> int:
    return 0 if value is None else len(value) if isinstance(value, list) else 1


def encode_tool_calls(value: Any) -> tuple[str | None, int]:
    """Return ``(column value, count)`` for a message's tool calls.

    A string is parsed as JSON first (unparsable means none). Falsy values
    store NULL. The count is the list length, 1 for any other value, 0 for None.
    """
    value = _tool_calls_value(value)
    count = _tool_call_count(value)
    if not value:
        return None, count
    return json_text(value, "tool_calls"), count


def stored_tool_call_count(stored: str | None) -> int:
    """How much a stored ``tool_calls`` value adds to ``sessions.tool_call_count`` (the count of :func:`encode_tool_calls`).

    JSON nested deeper than the parser goes (which the store never writes
    itself) counts as one call rather than failing: a restore keeps it.
    """
    try:
        return _tool_call_count(_tool_calls_value(stored))
    except ValueError:
        return 1


def decode_tool_calls(value: Any) -> Any:
    """JSON-decode a stored ``tool_calls`` value; NULL stays None, junk becomes []."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError, RecursionError):
        return []


def _encode_sidecar(value: Any, field: str, *, always_dump: bool = False) -> str | None:
    if not value:
        return None
    if isinstance(value, str) and not always_dump:
        return scrub_surrogates(value)
    return json_text(value, field)


def encode_display_metadata(value: Any) -> str | None:
    """Store a JSON object; a JSON-object string is re-dumped; anything else is NULL."""
    if not value:
        return None
    if isinstance(value, str):
        value = parse_json_text(value, "display_metadata")
    if not isinstance(value, dict):
        return None
    return json_text(value, "display_metadata")


def decode_display_metadata(value: Any) -> dict[str, Any] | None:
    """Return the stored object (unwrapping a legacy double-encoded string) or None."""
    if not value:
        return None
    try:
        decoded = json.loads(value)
        if isinstance(decoded, str):
            decoded = json.loads(decoded)
    except (TypeError, ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def coerce_timestamp(value: Any, default: float) -> float:
    """Epoch seconds from a datetime-like, number or numeric string; else ``default``."""
    if value is None:
        return default
    stamp = getattr(value, "timestamp", None)
    try:
        result = float(stamp()) if callable(stamp) else float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return result if math.isfinite(result) else default


def encode_message_args(
    *,
    role: Any,
    content: Any,
    tool_name: Any,
    tool_calls: Any,
    tool_call_id: Any,
    token_count: Any,
    finish_reason: Any,
    reasoning: Any,
    reasoning_content: Any,
    reasoning_details: Any,
    codex_reasoning_items: Any,
    codex_message_items: Any,
    platform_message_id: Any,
    observed: Any,
    effect_disposition: Any,
    timestamp: Any,
    api_content: Any,
    display_kind: Any,
    display_metadata: Any,
) -> MessageRow:
    """Encode the arguments of ``append_message`` (sidecars kept for any role)."""
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, not {type(role).__name__}")
    calls, count = encode_tool_calls(tool_calls)
    return MessageRow(
        role=scrub_surrogates(role),
        content=encode_content(content),
        tool_call_id=_opt_str(tool_call_id, "tool_call_id"),
        tool_calls=calls,
        tool_name=_opt_str(tool_name, "tool_name"),
        effect_disposition=_opt_str(effect_disposition, "effect_disposition"),
        timestamp=coerce_timestamp(timestamp, time.time()),
        token_count=_opt_int(token_count, "token_count"),
        finish_reason=_opt_str(finish_reason, "finish_reason"),
        reasoning=_opt_str(reasoning, "reasoning"),
        reasoning_content=_opt_str(reasoning_content, "reasoning_content"),
        reasoning_details=_encode_sidecar(reasoning_details, "reasoning_details"),
        codex_reasoning_items=_encode_sidecar(codex_reasoning_items, "codex_reasoning_items"),
        codex_message_items=_encode_sidecar(codex_message_items, "codex_message_items"),
        platform_message_id=_platform_id(platform_message_id),
        observed=1 if observed else 0,
        api_content=scrub_surrogates(api_content) if isinstance(api_content, str) else None,
        display_kind=scrub_surrogates(display_kind) if isinstance(display_kind, str) else None,
        display_metadata=encode_display_metadata(display_metadata),
        tool_call_count=count,
    )


def encode_text_turn(role: str, content: str, observed: Any = False) -> MessageRow:
    """What :func:`encode_message_args` makes of a str ``role`` and str ``content`` with every other argument None.

    The common agent turn, encoded without walking the optional columns.
    """
    return MessageRow(
        scrub_surrogates(role), encode_content(content), None, None, None, None, time.time(), None, None, None,
        None, None, None, None, None, 1 if observed else 0, None, None, None, 0,
    )


def encode_message_dicts(
    messages: Any, *, start: float | None = None, dump_sidecars: bool = False
) -> tuple[MessageRow, ...]:
    """Encode the message dicts of the batch/replace/compact writers.

    Rows without a usable ``timestamp`` get strictly increasing ones from a
    running default. ``dump_sidecars`` reproduces the compaction writers'
    habit of JSON-encoding string reasoning sidecars a second time.
    Raises ``TypeError`` (wrong type) or ``ValueError`` (out of the limits of
    :mod:`hermes_state.limits`) naming the index of the first message that is
    not a mapping or holds a value that cannot be stored.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of dicts, not {type(messages).__name__}")
    running = time.time() if start is None else start
    rows: list[MessageRow] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"messages[{index}] must be a dict, not {type(message).__name__}")
        try:
            row = _encode_one_dict(message, running, dump_sidecars)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"messages[{index}]: {exc}") from None
        rows.append(row)
        running = max(running + 1e-6, row.timestamp + 1e-6)
    return tuple(rows)


def _encode_one_dict(message: Mapping[str, Any], default_ts: float, dump_sidecars: bool) -> MessageRow:
    role = message.get("role") or "unknown"
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, not {type(role).__name__}")
    role = scrub_surrogates(role)
    calls, count = encode_tool_calls(message.get("tool_calls"))
    assistant = role == "assistant"
    sidecars: dict[str, Any] = {}
    for key in _ASSISTANT_ONLY:
        value = message.get(key) if assistant else None
        if key in ("reasoning", "reasoning_content"):
            sidecars[key] = _opt_str(value, key)
        else:
            sidecars[key] = _encode_sidecar(value, key, always_dump=dump_sidecars)
    api_content = message.get("api_content")
    display_kind = message.get("display_kind")
    platform_id = message.get("platform_message_id") or message.get("message_id")
    return MessageRow(
        role=role,
        content=encode_content(message.get("content")),
        tool_call_id=_opt_str(message.get("tool_call_id"), "tool_call_id"),
        tool_calls=calls,
        tool_name=_opt_str(message.get("tool_name"), "tool_name"),
        effect_disposition=_opt_str(message.get("effect_disposition"), "effect_disposition"),
        timestamp=coerce_timestamp(message.get("timestamp"), default_ts),
        token_count=_opt_int(message.get("token_count"), "token_count"),
        finish_reason=_opt_str(message.get("finish_reason"), "finish_reason"),
        platform_message_id=_platform_id(platform_id),
        observed=1 if message.get("observed") else 0,
        api_content=scrub_surrogates(api_content) if isinstance(api_content, str) else None,
        display_kind=scrub_surrogates(display_kind) if isinstance(display_kind, str) else None,
        display_metadata=encode_display_metadata(message.get("display_metadata")),
        tool_call_count=count,
        **sidecars,
    )


def decode_message_row(row: dict[str, Any]) -> dict[str, Any]:
    """Decode a raw ``messages`` row dict in place (content, tool_calls, metadata)."""
    content = row.get("content")
    if isinstance(content, str) and content.startswith(JSON_CONTENT_PREFIX):
        row["content"] = decode_content(content)
    if row.get("tool_calls") is not None:
        row["tool_calls"] = decode_tool_calls(row["tool_calls"])
    if "display_metadata" in row:
        row["display_metadata"] = decode_display_metadata(row["display_metadata"])
    return row
