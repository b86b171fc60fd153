"""Turn stored ``messages`` rows into OpenAI-style conversation dicts.

Everything here is pure and synchronous: the store fetches and filters the
rows (session chain, ``active`` state, ``ORDER BY id``) and hands them over;
these functions only reshape them. Keeping the rules out of the backends
means SQLite and PostgreSQL replay a transcript identically, and the rules
can be tested without a database.

The output shape is part of the compatibility contract with
async-hermes-agent (spec ``sqlite.md`` §3.9): key order, which keys appear,
how memory-context fences are scrubbed, and the alternation repair the agent
applies when it resumes a session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .encoding import decode_content, decode_display_metadata, decode_tool_calls

__all__ = [
    "build_conversation",
    "owns_transcript",
    "repair_message_sequence",
    "scrub_memory_context",
    "transcript_ids",
]


# --- which sessions make up a transcript -------------------------------------
# A session's transcript is its own rows after those of its ancestors (every
# parent link, root first), except that an explicit /branch owns its
# transcript: it starts with a copy of its parent's turns, so the parent's
# rows (including any added after the fork) are not its history, nor the
# history of the sessions that continue it.


def owns_transcript(model_config: str | None) -> bool:
    """True when the stored ``model_config`` JSON has a truthy ``_branched_from`` (Python truthiness)."""
    if not model_config or "_branched_from" not in model_config:
        return False
    try:
        config = json.loads(model_config)
    except (ValueError, RecursionError):
        return False
    return isinstance(config, dict) and bool(config.get("_branched_from"))


def transcript_ids(chain: Iterable[tuple[str, str | None]]) -> list[str]:
    """Root-first ids of a transcript, from ``(id, model_config)`` pairs of the session and its ancestors, tip first.

    The walk ends at the first session that :func:`owns_transcript`.
    """
    ids: list[str] = []
    for session_id, model_config in chain:
        ids.append(session_id)
        if owns_transcript(model_config):
            break
    ids.reverse()
    return ids

# --- memory-context scrubbing ------------------------------------------------
# The agent appends recalled memory to the text it sends to the model inside a
# <memory-context> fence. Replaying that fence as if the user or model had
# written it would feed stale memory back in as conversation, so it goes.
# Three passes, in this order: whole fenced blocks, the system-note sentence
# (which may appear without its fence), then any tag left unpaired.
_MEMORY_BLOCK = re.compile(
    r"<\s*memory-context\s*>.*?</\s*memory-context\s*>",
    re.IGNORECASE | re.DOTALL,
)
_MEMORY_NOTE = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*"
    r"NOT new user input\.\s*Treat as "
    r"(?:informational background data|authoritative reference data[^\]]*)"
    r"\.\]\s*",
    re.IGNORECASE,
)
_MEMORY_TAG = re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE)

# --- post-processing patterns ------------------------------------------------
# Older builds let a background skill/memory review fork write its harness
# prompt into the live session; replaying it makes the agent act as curator.
# Matched case-sensitively on the left-stripped content.
_REVIEW_HARNESS_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)

# A bare "[tool_name]" that an older agent loop persisted as the content of a
# tool-call turn; replaying it teaches the model to echo the marker.
_STALE_MARKER = re.compile(r"\[[A-Za-z_][A-Za-z0-9_.-]*\]")

# Sidecars stored as JSON text and replayed decoded on assistant rows only.
_JSON_SIDECARS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")

# finish_reason values marking a provisional assistant answer that a later
# assistant turn supersedes (the later one replaces it instead of merging).
_SUPERSEDED_FINISH_REASONS = frozenset({"verification_required", "verify_hook_continue"})


def scrub_memory_context(text: str) -> str:
    """Remove injected memory context from ``text``.

    Returns ``text`` without ``<memory-context>…</memory-context>`` blocks,
    without the "[System note: The following is recalled memory context, NOT
    new user input. …]" sentence and without stray opening/closing
    ``memory-context`` tags (all case-insensitive). Surrounding whitespace is
    left alone; callers strip it when they want to.
    """
    text = _MEMORY_BLOCK.sub("", text)
    text = _MEMORY_NOTE.sub("", text)
    return _MEMORY_TAG.sub("", text)


def _loads_or_none(raw: Any) -> Any:
    # Sidecars are replayed best-effort: a corrupt one must not break resume.
    try:
        return json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return None


def _row_to_message(row: Mapping[str, Any], include_row_ids: bool) -> dict[str, Any]:
    """Build one message dict; key insertion order is part of the contract."""
    role = row.get("role")
    content = decode_content(row.get("content"))
    if role in ("user", "assistant") and isinstance(content, str):
        content = scrub_memory_context(content).strip()
    msg: dict[str, Any] = {"role": role, "content": content}
    if include_row_ids and row.get("id") is not None:
        msg["_row_id"] = row["id"]
    # api_content holds the exact bytes once sent to the provider; replay
    # substitutes it to keep the prompt cache stable, so it is never cleaned.
    for key in ("api_content", "display_kind"):
        if row.get(key):
            msg[key] = row[key]
    if row.get("display_metadata"):
        metadata = decode_display_metadata(row["display_metadata"])
        if metadata is not None:
            msg["display_metadata"] = metadata
    for key in ("timestamp", "tool_call_id", "tool_name", "effect_disposition"):
        if row.get(key):
            msg[key] = row[key]
    if row.get("tool_calls"):
        msg["tool_calls"] = decode_tool_calls(row["tool_calls"])
    # Exposed as message_id, the name the agent's JSONL transcripts use.
    if row.get("platform_message_id"):
        msg["message_id"] = row["platform_message_id"]
    if row.get("observed"):
        msg["observed"] = True
    if role == "assistant":
        for key in ("finish_reason", "reasoning"):
            if row.get(key):
                msg[key] = row[key]
        # An empty reasoning_content is meaningful to strict thinking
        # providers, so only NULL suppresses the key.
        if row.get("reasoning_content") is not None:
            msg["reasoning_content"] = row["reasoning_content"]
        for key in _JSON_SIDECARS:
            if row.get(key):
                msg[key] = _loads_or_none(row[key])
    return msg


def _is_replayed_user_turn(messages: list[dict[str, Any]], msg: dict[str, Any]) -> bool:
    """True if ``msg`` repeats a user turn already seen since the last real reply.

    A compression child starts by replaying the last user turn of its parent;
    when the chain is read as one conversation that turn would appear twice.
    """
    if msg.get("role") != "user":
        return False
    content = msg.get("content")
    if not isinstance(content, str) or not content:
        return False
    for earlier in reversed(messages):
        role = earlier.get("role")
        if role == "user" and earlier.get("content") == content:
            return True
        if role == "assistant" and (earlier.get("content") or earlier.get("tool_calls")):
            # A real assistant reply separates turns: a repeat beyond it
            # is a genuine new message, not a replay.
            return False
    return False


def _is_review_harness(msg: Any) -> bool:
    if not isinstance(msg, dict) or msg.get("role") not in ("user", "system"):
        return False
    content = msg.get("content")
    if not isinstance(content, str):
        return False
    head = content.lstrip()
    return any(head.startswith(prefix) for prefix in _REVIEW_HARNESS_PREFIXES)


def _drop_review_harness(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop harness prompts and the assistant message directly after each."""
    kept: list[dict[str, Any]] = []
    drop_reply = False
    for msg in messages:
        if _is_review_harness(msg):
            drop_reply = True
            continue
        if drop_reply:
            drop_reply = False
            if isinstance(msg, dict) and msg.get("role") == "assistant":
                continue
        kept.append(msg)
    return kept


def _blank_stale_markers(messages: list[dict[str, Any]]) -> None:
    """Set ``content`` to "" on tool-call turns whose content is a bare marker."""
    for msg in messages:
        if msg.get("role") != "assistant" or not msg.get("tool_calls"):
            continue
        content = msg.get("content")
        # Only the stray text goes; the tool calls and results stay paired.
        if isinstance(content, str) and _STALE_MARKER.fullmatch(content.strip()):
            msg["content"] = ""


def build_conversation(
    rows: Iterable[Mapping[str, Any]],
    *,
    include_ancestors: bool = False,
    include_row_ids: bool = False,
    repair_alternation: bool = False,
) -> list[dict[str, Any]]:
    """Rebuild OpenAI-style message dicts from raw ``messages`` rows.

    ``rows`` are row dicts with the stored column values, already filtered
    and ordered by ``id`` (root session first when ``include_ancestors``).
    They are not modified.

    Returns a new list of new dicts with keys in this order, each present
    only when noted: ``role``, ``content`` (decoded; user/assistant strings
    scrubbed of memory context and stripped), ``_row_id`` (with
    ``include_row_ids``), ``api_content``, ``display_kind``,
    ``display_metadata``, ``timestamp``, ``tool_call_id``, ``tool_name``,
    ``effect_disposition``, ``tool_calls``, ``message_id``, ``observed`` and,
    on assistant rows, ``finish_reason``, ``reasoning``,
    ``reasoning_content``, ``reasoning_details``, ``codex_reasoning_items``,
    ``codex_message_items``.

    With ``include_ancestors`` a user turn replayed across a compression
    boundary is dropped. Background-review harness turns are always removed
    and bare ``[marker]`` contents on tool-call turns blanked. With
    ``repair_alternation`` the result also goes through
    :func:`repair_message_sequence`.
    """
    messages: list[dict[str, Any]] = []
    for row in rows:
        msg = _row_to_message(row, include_row_ids)
        # Compared with what has been kept so far, so only the first copy
        # of a replayed turn survives.
        if include_ancestors and _is_replayed_user_turn(messages, msg):
            continue
        messages.append(msg)
    messages = _drop_review_harness(messages)
    _blank_stale_markers(messages)
    if repair_alternation and messages:
        repair_message_sequence(None, messages)
    return messages


def _is_codex_interim(msg: dict[str, Any]) -> bool:
    # Codex Responses turns carry encrypted continuation state that must be
    # replayed one turn at a time, so they are never merged.
    return bool(
        msg.get("codex_reasoning_items")
        or msg.get("codex_message_items")
        or msg.get("finish_reason") == "incomplete"
    )


def _absorb_assistant(prev: dict[str, Any], msg: dict[str, Any]) -> None:
    """Fold assistant ``msg`` into the assistant message ``prev`` before it."""
    earlier_calls = list(prev.get("tool_calls") or [])
    later_calls = list(msg.get("tool_calls") or [])
    if later_calls:
        prev["tool_calls"] = earlier_calls + later_calls
    elif earlier_calls:
        prev["tool_calls"] = earlier_calls
    earlier_text = prev.get("content")
    later_text = msg.get("content")
    if isinstance(earlier_text, str) and isinstance(later_text, str):
        parts = [part for part in (earlier_text.strip(), later_text.strip()) if part]
        prev["content"] = "\n".join(parts)
    elif not earlier_text and later_text is not None:
        # Multimodal (list) content is never spliced; it is only adopted
        # when the earlier turn had nothing.
        prev["content"] = later_text
    # Strict thinking providers need reasoning_content on the merged
    # tool-call turn; the first non-empty one is enough.
    if not prev.get("reasoning_content") and msg.get("reasoning_content"):
        prev["reasoning_content"] = msg["reasoning_content"]


def _merge_assistants(messages: list[Any]) -> tuple[list[Any], int]:
    """Collapse runs of assistant messages with nothing between them."""
    out: list[Any] = []
    repairs = 0
    for msg in messages:
        prev = out[-1] if out else None
        if (
            isinstance(msg, dict)
            and isinstance(prev, dict)
            and msg.get("role") == "assistant"
            and prev.get("role") == "assistant"
            and not _is_codex_interim(msg)
            and not _is_codex_interim(prev)
        ):
            repairs += 1
            if prev.get("finish_reason") in _SUPERSEDED_FINISH_REASONS:
                # A provisional answer is replaced by the one that followed it.
                out[-1] = msg
            else:
                _absorb_assistant(prev, msg)
            continue
        out.append(msg)
    return out, repairs


def _drop_orphan_tool_results(messages: list[Any]) -> tuple[list[Any], int]:
    """Keep a tool result only if the latest assistant turn issued its call id."""
    out: list[Any] = []
    repairs = 0
    open_ids: set[Any] = set()
    for msg in messages:
        if not isinstance(msg, dict):
            out.append(msg)
            continue
        role = msg.get("role")
        if role == "assistant":
            open_ids = set()
            for call in msg.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                # Codex results may reference either the item id or call_id.
                for key in ("id", "call_id"):
                    if call.get(key):
                        open_ids.add(call[key])
            out.append(msg)
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id and call_id in open_ids:
                # Consumed: a duplicate result for the same call is dropped.
                open_ids.discard(call_id)
                out.append(msg)
            else:
                repairs += 1
        else:
            if role == "user":
                # A user turn closes the previous round of tool results.
                open_ids = set()
            out.append(msg)
    return out, repairs


def _merge_users(messages: list[Any]) -> tuple[list[Any], int]:
    """Join consecutive plain-text user messages with a blank line."""
    out: list[Any] = []
    repairs = 0
    for msg in messages:
        prev = out[-1] if out else None
        if (
            isinstance(msg, dict)
            and isinstance(prev, dict)
            and msg.get("role") == "user"
            and prev.get("role") == "user"
        ):
            earlier = prev.get("content", "")
            later = msg.get("content", "")
            # Multimodal content is left as separate messages rather than
            # risk mangling attachment blocks.
            if isinstance(earlier, str) and isinstance(later, str):
                prev["content"] = (
                    earlier + "\n\n" + later if earlier and later else (earlier or later)
                )
                # The exact-bytes sidecar no longer matches the merged text.
                prev.pop("api_content", None)
                repairs += 1
                continue
        out.append(msg)
    return out, repairs


def repair_message_sequence(agent: object | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Repair role alternation in ``messages`` the way async-hermes-agent does.

    ``agent`` is accepted for signature compatibility and ignored. Three
    passes run in order: consecutive assistant messages are merged (tool
    calls concatenated, text joined with a newline; Codex interim turns are
    exempt and a provisional ``verification_required``/``verify_hook_continue``
    turn is replaced by its successor); tool results whose ``tool_call_id``
    was not issued by the latest assistant turn (or was already answered, or
    follow a user turn) are dropped; consecutive plain-text user messages are
    joined with a blank line and lose their ``api_content``. Missing tool
    results are deliberately not stubbed.

    The list is rewritten in place and the surviving message dicts (some of
    them modified) keep their identity. Returns the same list object.
    """
    if not messages:
        return messages
    merged, fixed_assistants = _merge_assistants(messages)
    filtered, fixed_tools = _drop_orphan_tool_results(merged)
    final, fixed_users = _merge_users(filtered)
    if fixed_assistants or fixed_tools or fixed_users:
        messages[:] = final
    return messages
