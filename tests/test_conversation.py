"""Tests for hermes_state.conversation: rows -> OpenAI-style messages (spec §3.9)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hermes_state.conversation import (
    build_conversation,
    repair_message_sequence,
    scrub_memory_context,
)

NOTE_AUTHORITATIVE = (
    "[System note: The following is recalled memory context, NOT new user input. "
    "Treat as authoritative reference data \u2014 this is the agent's persistent memory "
    "and should inform all responses.]"
)
NOTE_INFORMATIONAL = (
    "[System note: The following is recalled memory context, NOT new user input. "
    "Treat as informational background data.]"
)
SKILL_HARNESS = "Review the conversation above and update the skill library. Be ACTIVE."
MEMORY_HARNESS = "Review the conversation above and consider saving to memory if appropriate."

_next_id = iter(range(1, 1_000_000))


def row(role: str, content: Any = None, **columns: Any) -> dict[str, Any]:
    """A raw ``messages`` row with all 23 columns, as the store returns it."""
    base: dict[str, Any] = {
        "id": next(_next_id),
        "session_id": "s1",
        "role": role,
        "content": content,
        "tool_call_id": None,
        "tool_calls": None,
        "tool_name": None,
        "effect_disposition": None,
        "timestamp": 1_700_000_000.5,
        "token_count": None,
        "finish_reason": None,
        "reasoning": None,
        "reasoning_content": None,
        "reasoning_details": None,
        "codex_reasoning_items": None,
        "codex_message_items": None,
        "platform_message_id": None,
        "observed": 0,
        "active": 1,
        "compacted": 0,
        "api_content": None,
        "display_kind": None,
        "display_metadata": None,
    }
    assert set(columns) <= set(base), set(columns) - set(base)
    base.update(columns)
    return base


def calls(*ids: str) -> str:
    """A stored ``tool_calls`` column holding one call per id."""
    return json.dumps(
        [{"id": i, "type": "function", "function": {"name": "terminal", "arguments": "{}"}} for i in ids]
    )


def nul_json(value: Any) -> str:
    return "\x00json:" + json.dumps(value)


# --------------------------------------------------------------------------
# Key order and presence
# --------------------------------------------------------------------------


def test_full_assistant_row_key_order() -> None:
    r = row(
        "assistant",
        "answer",
        tool_call_id="tc-own",
        tool_calls=calls("c1"),
        tool_name="terminal",
        effect_disposition="applied",
        finish_reason="tool_calls",
        reasoning="thinking",
        reasoning_content="rc",
        reasoning_details=json.dumps([{"type": "summary", "text": "x"}]),
        codex_reasoning_items=json.dumps([{"id": "r1"}]),
        codex_message_items=json.dumps([{"id": "m1"}]),
        platform_message_id="pm-9",
        observed=1,
        api_content="answer as sent",
        display_kind="note",
        display_metadata=json.dumps({"task_count": 2}),
    )
    (msg,) = build_conversation([r], include_row_ids=True)
    assert list(msg) == [
        "role",
        "content",
        "_row_id",
        "api_content",
        "display_kind",
        "display_metadata",
        "timestamp",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
        "tool_calls",
        "message_id",
        "observed",
        "finish_reason",
        "reasoning",
        "reasoning_content",
        "reasoning_details",
        "codex_reasoning_items",
        "codex_message_items",
    ]
    assert msg["_row_id"] == r["id"]
    assert msg["display_metadata"] == {"task_count": 2}
    assert msg["timestamp"] == 1_700_000_000.5
    assert msg["tool_calls"][0]["id"] == "c1"
    assert msg["message_id"] == "pm-9"
    assert msg["observed"] is True
    assert msg["reasoning_details"] == [{"type": "summary", "text": "x"}]
    assert msg["codex_reasoning_items"] == [{"id": "r1"}]
    assert msg["codex_message_items"] == [{"id": "m1"}]


def test_full_tool_row_key_order_without_row_ids() -> None:
    r = row(
        "tool",
        "output",
        tool_call_id="c1",
        tool_name="terminal",
        effect_disposition="read_only",
        platform_message_id="p1",
        observed=1,
        display_kind="tool",
        display_metadata=json.dumps({"k": "v"}),
    )
    (msg,) = build_conversation([r])
    assert list(msg) == [
        "role",
        "content",
        "display_kind",
        "display_metadata",
        "timestamp",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
        "message_id",
        "observed",
    ]


def test_minimal_row_has_only_role_and_content() -> None:
    (msg,) = build_conversation([row("user", "hi", timestamp=0)])
    assert msg == {"role": "user", "content": "hi"}


def test_falsy_columns_are_omitted() -> None:
    r = row(
        "assistant",
        "x",
        timestamp=0.0,
        tool_call_id="",
        tool_name="",
        effect_disposition="",
        tool_calls="",
        platform_message_id="",
        observed=0,
        api_content="",
        display_kind="",
        display_metadata="",
        finish_reason="",
        reasoning="",
        reasoning_details="",
        codex_reasoning_items="",
        codex_message_items="",
    )
    (msg,) = build_conversation([r])
    assert msg == {"role": "assistant", "content": "x"}


def test_row_id_only_when_requested_and_not_null() -> None:
    r = row("user", "a")
    assert "_row_id" not in build_conversation([r])[0]
    assert build_conversation([r], include_row_ids=True)[0]["_row_id"] == r["id"]
    assert "_row_id" not in build_conversation([row("user", "a", id=None)], include_row_ids=True)[0]


def test_tool_calls_decoded_for_any_role_and_invalid_json_becomes_empty_list() -> None:
    user, tool, broken = build_conversation(
        [
            row("user", "u", tool_calls=calls("c1")),
            row("tool", "t", tool_calls=calls("c2")),
            row("assistant", "a", tool_calls="{not json"),
        ]
    )
    assert user["tool_calls"][0]["id"] == "c1"
    assert tool["tool_calls"][0]["id"] == "c2"
    assert broken["tool_calls"] == []


def test_tool_calls_empty_json_array_text_is_kept() -> None:
    (msg,) = build_conversation([row("assistant", "a", tool_calls="[]")])
    assert msg["tool_calls"] == []


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (json.dumps({"a": 1}), {"a": 1}),
        (json.dumps(json.dumps({"legacy": True})), {"legacy": True}),
        ("{broken", None),
        (json.dumps([1, 2]), None),
        (json.dumps("just text"), None),
    ],
)
def test_display_metadata_decoding(stored: str, expected: Any) -> None:
    (msg,) = build_conversation([row("user", "x", display_metadata=stored)])
    if expected is None:
        assert "display_metadata" not in msg
    else:
        assert msg["display_metadata"] == expected


# --------------------------------------------------------------------------
# Assistant-only reasoning keys
# --------------------------------------------------------------------------

REASONING_COLUMNS = {
    "finish_reason": "stop",
    "reasoning": "r",
    "reasoning_content": "rc",
    "reasoning_details": "[1]",
    "codex_reasoning_items": "[2]",
    "codex_message_items": "[3]",
}


@pytest.mark.parametrize("role", ["user", "tool", "system"])
def test_reasoning_keys_only_on_assistant_rows(role: str) -> None:
    (msg,) = build_conversation([row(role, "x", **REASONING_COLUMNS)])
    assert not set(REASONING_COLUMNS) & set(msg)


def test_reasoning_keys_on_assistant_row() -> None:
    (msg,) = build_conversation([row("assistant", "x", **REASONING_COLUMNS)])
    assert {k: msg[k] for k in REASONING_COLUMNS} == {
        "finish_reason": "stop",
        "reasoning": "r",
        "reasoning_content": "rc",
        "reasoning_details": [1],
        "codex_reasoning_items": [2],
        "codex_message_items": [3],
    }


def test_empty_reasoning_content_is_kept_but_null_is_not() -> None:
    kept, absent = build_conversation(
        [row("assistant", "a", reasoning_content=""), row("assistant", "b", reasoning_content=None)]
    )
    assert kept["reasoning_content"] == ""
    assert "reasoning_content" not in absent


def test_reasoning_sidecar_decode_failure_gives_none() -> None:
    (msg,) = build_conversation(
        [
            row(
                "assistant",
                "a",
                reasoning_details="{oops",
                codex_reasoning_items="[1,",
                codex_message_items="nope",
            )
        ]
    )
    assert msg["reasoning_details"] is None
    assert msg["codex_reasoning_items"] is None
    assert msg["codex_message_items"] is None
    assert list(msg)[-3:] == ["reasoning_details", "codex_reasoning_items", "codex_message_items"]


def test_double_encoded_sidecar_decodes_one_layer() -> None:
    # archive_and_compact stores a string sidecar as a JSON string literal.
    inner = json.dumps([{"type": "x"}])
    (msg,) = build_conversation([row("assistant", "a", reasoning_details=json.dumps(inner))])
    assert msg["reasoning_details"] == inner


# --------------------------------------------------------------------------
# Content decoding and scrubbing
# --------------------------------------------------------------------------


def test_nul_prefixed_json_multimodal_content_is_decoded() -> None:
    parts = [
        {"type": "text", "text": "look \u00e9\u4e2d\U0001f600 <memory-context>kept</memory-context>"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    stored = nul_json(parts)
    assert stored.isascii()
    user, assistant = build_conversation([row("user", stored), row("assistant", stored)])
    # Lists are not scrubbed: only string content is.
    assert user["content"] == parts
    assert assistant["content"] == parts


def test_nul_prefixed_json_with_escaped_lone_surrogate() -> None:
    stored = nul_json([{"type": "text", "text": "bad \ud83d half"}])
    assert "\\ud83d" in stored
    (msg,) = build_conversation([row("user", stored)])
    assert msg["content"] == [{"type": "text", "text": "bad \ud83d half"}]


def test_nul_prefixed_dict_and_scalar_json() -> None:
    a, b = build_conversation([row("tool", nul_json({"k": [1, None]})), row("user", nul_json(None))])
    assert a["content"] == {"k": [1, None]}
    assert b["content"] is None


def test_invalid_nul_json_returns_raw_string() -> None:
    raw = "\x00json:{not valid"
    tool, user = build_conversation([row("tool", raw), row("user", raw)])
    assert tool["content"] == raw
    # Still a string for user rows, so scrub + strip run; neither changes it.
    assert user["content"] == raw


def test_non_string_content_passes_through() -> None:
    blob, number, null = build_conversation(
        [row("user", b"\x00\xff"), row("assistant", 42), row("assistant", None)]
    )
    assert blob["content"] == b"\x00\xff"
    assert number["content"] == 42
    assert null["content"] is None


def test_user_and_assistant_content_scrubbed_and_stripped() -> None:
    text = (
        "  What is next?\n\n<memory-context>\n"
        + NOTE_AUTHORITATIVE
        + "\n\nuser likes tea\n</memory-context>\n  "
    )
    user, assistant = build_conversation([row("user", text), row("assistant", text)])
    assert user["content"] == "What is next?"
    assert assistant["content"] == "What is next?"


def test_tool_and_system_content_verbatim() -> None:
    text = "  <memory-context>secret</memory-context> " + NOTE_INFORMATIONAL + "\n"
    tool, system = build_conversation([row("tool", text), row("system", text)])
    assert tool["content"] == text
    assert system["content"] == text


def test_api_content_is_never_scrubbed() -> None:
    sent = "hi\n\n<memory-context>\nfacts\n</memory-context>  "
    (msg,) = build_conversation([row("user", sent, api_content=sent)])
    assert msg["content"] == "hi"
    assert msg["api_content"] == sent


def test_odd_unicode_and_lone_surrogates_survive() -> None:
    text = "\u3000\u00a0 caf\u00e9 \u202eRTL\u202c e\u0301 \u200b\U0001f9ea \ud800 lone \udfff\u3000\n"
    user, tool = build_conversation([row("user", text), row("tool", text)])
    # str.strip removes Unicode whitespace (ideographic space, NBSP) only at the ends.
    assert user["content"] == "caf\u00e9 \u202eRTL\u202c e\u0301 \u200b\U0001f9ea \ud800 lone \udfff"
    assert tool["content"] == text


def test_scrub_memory_context_rules() -> None:
    assert scrub_memory_context("a <memory-context>x\ny</memory-context> b") == "a  b"
    assert scrub_memory_context("a <MEMORY-Context >x</ memory-CONTEXT> b") == "a  b"
    # Non-greedy: text between two blocks survives.
    assert scrub_memory_context("<memory-context>1</memory-context>keep<memory-context>2</memory-context>") == "keep"
    # The note and the whitespace after it go, even outside a fence.
    assert scrub_memory_context("x " + NOTE_INFORMATIONAL + "  \n\ny") == "x y"
    assert scrub_memory_context("x " + NOTE_AUTHORITATIVE.lower() + "\ny") == "x y"
    # Unpaired tags are removed, their contents kept.
    assert scrub_memory_context("<memory-context>\nleft open") == "\nleft open"
    assert scrub_memory_context("closed only</memory-context>!") == "closed only!"
    # Outer whitespace is not the scrubber's business.
    assert scrub_memory_context("  plain  ") == "  plain  "
    # A note with different wording is not recognised.
    odd_note = "[System note: something else entirely.]"
    assert scrub_memory_context(odd_note) == odd_note


def test_rows_are_not_mutated() -> None:
    rows = [
        row("user", "  hi <memory-context>x</memory-context>", tool_calls=calls("a")),
        row("assistant", "[terminal]", tool_calls=calls("c1")),
        row("assistant", "more"),
        row("user", "again"),
    ]
    before = copy.deepcopy(rows)
    build_conversation(rows, include_ancestors=True, include_row_ids=True, repair_alternation=True)
    assert rows == before


def test_empty_rows() -> None:
    assert build_conversation([]) == []
    assert build_conversation([], include_ancestors=True, repair_alternation=True) == []


# --------------------------------------------------------------------------
# include_ancestors: replayed user turns
# --------------------------------------------------------------------------


def contents(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m["content"]) for m in messages]


def test_replayed_user_turn_dropped_only_with_include_ancestors() -> None:
    rows = [
        row("user", "summarise", session_id="root"),
        row("assistant", "", session_id="root"),
        row("user", "summarise", session_id="child"),
        row("assistant", "done", session_id="child"),
    ]
    assert contents(build_conversation(rows, include_ancestors=True)) == [
        ("user", "summarise"),
        ("assistant", ""),
        ("assistant", "done"),
    ]
    assert len(build_conversation(rows)) == 4


def test_replay_scan_stops_at_assistant_with_content_or_tool_calls() -> None:
    with_text = [row("user", "q"), row("assistant", "answer"), row("user", "q")]
    with_calls = [row("user", "q"), row("assistant", "", tool_calls=calls("c1")), row("user", "q")]
    assert len(build_conversation(with_text, include_ancestors=True)) == 3
    assert len(build_conversation(with_calls, include_ancestors=True)) == 3


def test_replay_scan_passes_tool_and_system_rows_and_invalid_calls() -> None:
    rows = [
        row("user", "q"),
        row("system", "sys"),
        row("tool", "orphan", tool_call_id="zz"),
        # Invalid tool_calls decode to [] which does not stop the scan.
        row("assistant", "  ", tool_calls="garbage"),
        row("user", "q"),
    ]
    out = build_conversation(rows, include_ancestors=True)
    assert [m["role"] for m in out] == ["user", "system", "tool", "assistant"]


def test_replay_compares_scrubbed_content_and_keeps_first_copy() -> None:
    rows = [
        row("user", "hello"),
        row("user", "hello\n<memory-context>\nfacts\n</memory-context>"),
        row("user", "  hello  "),
        row("user", "Hello"),
    ]
    out = build_conversation(rows, include_ancestors=True, include_row_ids=True)
    assert contents(out) == [("user", "hello"), ("user", "Hello")]
    assert out[0]["_row_id"] == rows[0]["id"]


def test_replay_ignores_empty_and_non_string_user_content() -> None:
    parts = nul_json([{"type": "text", "text": "x"}])
    rows = [row("user", ""), row("user", ""), row("user", parts), row("user", parts)]
    assert len(build_conversation(rows, include_ancestors=True)) == 4


# --------------------------------------------------------------------------
# Background-review harness removal
# --------------------------------------------------------------------------


def test_harness_prompt_and_following_assistant_dropped() -> None:
    rows = [
        row("user", "real task"),
        row("assistant", "real answer"),
        row("user", "\n  " + SKILL_HARNESS),
        row("assistant", "Nothing to save."),
        row("system", MEMORY_HARNESS),
        row("assistant", "Saved."),
        row("user", "next task"),
    ]
    assert contents(build_conversation(rows)) == [
        ("user", "real task"),
        ("assistant", "real answer"),
        ("user", "next task"),
    ]


def test_harness_followed_by_non_assistant_keeps_it() -> None:
    rows = [row("user", MEMORY_HARNESS), row("tool", "t", tool_call_id="c"), row("assistant", "kept")]
    assert contents(build_conversation(rows)) == [("tool", "t"), ("assistant", "kept")]


def test_consecutive_harness_prompts_drop_one_assistant() -> None:
    rows = [
        row("user", SKILL_HARNESS),
        row("user", MEMORY_HARNESS),
        row("assistant", "curator"),
        row("assistant", "survivor"),
    ]
    assert contents(build_conversation(rows)) == [("assistant", "survivor")]


def test_harness_detection_is_narrow() -> None:
    rows = [
        row("assistant", SKILL_HARNESS),  # wrong role
        row("tool", MEMORY_HARNESS, tool_call_id="c"),  # wrong role
        row("user", SKILL_HARNESS.lower()),  # case-sensitive
        row("user", "Please: " + SKILL_HARNESS),  # not a prefix
        row("user", nul_json([{"type": "text", "text": SKILL_HARNESS}])),  # not a string
    ]
    assert len(build_conversation(rows)) == 5


def test_harness_prefix_seen_after_memory_scrub() -> None:
    rows = [row("user", "<memory-context>m</memory-context>\n" + SKILL_HARNESS), row("assistant", "x")]
    assert build_conversation(rows) == []


def test_harness_as_last_message() -> None:
    assert contents(build_conversation([row("user", "a"), row("user", SKILL_HARNESS)])) == [("user", "a")]


# --------------------------------------------------------------------------
# Stale bracketed marker repair
# --------------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["[terminal]", "[memory]", "[_x]", "[skill_manage]", "[a.b-c_9]", " [T] \n"])
def test_bare_marker_on_tool_call_turn_is_blanked(marker: str) -> None:
    (msg,) = build_conversation([row("assistant", marker, tool_calls=calls("c1"))])
    assert msg["content"] == ""
    assert msg["tool_calls"][0]["id"] == "c1"


@pytest.mark.parametrize(
    "content", ["[1abc]", "[a b]", "[]", "[terminal] ok", "[[x]]", "[caf\u00e9]", "(terminal)", "[x/y]"]
)
def test_non_marker_content_kept(content: str) -> None:
    (msg,) = build_conversation([row("assistant", content, tool_calls=calls("c1"))])
    assert msg["content"] == content


def test_marker_needs_truthy_tool_calls_and_assistant_role() -> None:
    no_calls, bad_calls, tool_role = build_conversation(
        [
            row("assistant", "[terminal]"),
            row("assistant", "[terminal]", tool_calls="not json"),  # decodes to []
            row("tool", "[terminal]", tool_calls=calls("c1")),
        ]
    )
    assert no_calls["content"] == "[terminal]"
    assert bad_calls["content"] == "[terminal]"
    assert tool_role["content"] == "[terminal]"


# --------------------------------------------------------------------------
# repair_alternation through build_conversation
# --------------------------------------------------------------------------


def test_repair_alternation_only_when_requested() -> None:
    rows = [
        row("user", "a"),
        row("user", "b"),
        row("assistant", "[terminal]", tool_calls=calls("c1")),
        row("assistant", "done"),
        row("tool", "late", tool_call_id="c1"),
        row("tool", "stray", tool_call_id="nope"),
    ]
    assert len(build_conversation(rows)) == 6
    out = build_conversation(rows, repair_alternation=True, include_row_ids=True)
    assert [m["role"] for m in out] == ["user", "assistant", "tool"]
    assert out[0]["content"] == "a\n\nb"
    assert out[0]["_row_id"] == rows[0]["id"]
    # The marker was blanked before the merge, so only "done" remains.
    assert out[1]["content"] == "done"
    assert out[2]["content"] == "late"


def test_harness_removed_before_alternation_repair() -> None:
    rows = [
        row("user", "one"),
        row("user", SKILL_HARNESS),
        row("assistant", "curator reply"),
        row("user", "two"),
    ]
    out = build_conversation(rows, repair_alternation=True)
    assert contents(out) == [("user", "one\n\ntwo")]


# --------------------------------------------------------------------------
# repair_message_sequence
# --------------------------------------------------------------------------


def tc(item_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "type": "function", "function": {"name": "f", "arguments": "{}"}, **extra}


def test_repair_returns_same_list_and_keeps_identity() -> None:
    first = {"role": "user", "content": "a"}
    second = {"role": "user", "content": "b"}
    reply = {"role": "assistant", "content": "r"}
    messages = [first, second, reply]
    result = repair_message_sequence(None, messages)
    assert result is messages
    assert messages == [{"role": "user", "content": "a\n\nb"}, reply]
    assert messages[0] is first and messages[1] is reply


def test_repair_ignores_agent_and_handles_empty() -> None:
    empty: list[dict[str, Any]] = []
    assert repair_message_sequence(object(), empty) is empty
    assert empty == []


def test_repair_without_violations_changes_nothing() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [tc("c1")]},
        {"role": "tool", "content": "t", "tool_call_id": "c1"},
        {"role": "assistant", "content": "a"},
    ]
    snapshot = copy.deepcopy(messages)
    items = list(messages)
    assert repair_message_sequence(None, messages) == snapshot
    assert all(a is b for a, b in zip(messages, items))


def test_consecutive_assistants_merge_calls_text_and_reasoning() -> None:
    messages = [
        {"role": "assistant", "content": "  first  ", "tool_calls": [tc("a")], "reasoning_content": ""},
        {"role": "assistant", "content": "\nsecond\n", "tool_calls": [tc("b")], "reasoning_content": "why"},
        {"role": "assistant", "content": "   ", "reasoning_content": "later"},
        {"role": "tool", "content": "A", "tool_call_id": "a"},
        {"role": "tool", "content": "B", "tool_call_id": "b"},
    ]
    repair_message_sequence(None, messages)
    assert messages == [
        {
            "role": "assistant",
            "content": "first\nsecond",
            "tool_calls": [tc("a"), tc("b")],
            "reasoning_content": "why",
        },
        {"role": "tool", "content": "A", "tool_call_id": "a"},
        {"role": "tool", "content": "B", "tool_call_id": "b"},
    ]


def test_assistant_merge_with_non_string_content() -> None:
    parts = [{"type": "text", "text": "img"}]
    adopt = [{"role": "assistant", "content": None}, {"role": "assistant", "content": parts}]
    keep = [{"role": "assistant", "content": parts}, {"role": "assistant", "content": "text"}]
    none_after = [{"role": "assistant", "content": ""}, {"role": "assistant", "content": None}]
    assert repair_message_sequence(None, adopt) == [{"role": "assistant", "content": parts}]
    assert repair_message_sequence(None, keep) == [{"role": "assistant", "content": parts}]
    assert repair_message_sequence(None, none_after) == [{"role": "assistant", "content": ""}]


def test_earlier_tool_calls_kept_when_later_has_none() -> None:
    messages = [
        {"role": "assistant", "content": "a", "tool_calls": [tc("x")]},
        {"role": "assistant", "content": "b", "tool_calls": []},
    ]
    assert repair_message_sequence(None, messages) == [
        {"role": "assistant", "content": "a\nb", "tool_calls": [tc("x")]}
    ]


@pytest.mark.parametrize(
    "interim",
    [
        {"codex_reasoning_items": [{"id": "r"}]},
        {"codex_message_items": [{"id": "m"}]},
        {"finish_reason": "incomplete"},
    ],
)
def test_codex_interim_assistants_are_not_merged(interim: dict[str, Any]) -> None:
    before = [{"role": "assistant", "content": "one", **interim}, {"role": "assistant", "content": "two"}]
    after = [{"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two", **interim}]
    assert len(repair_message_sequence(None, copy.deepcopy(before))) == 2
    assert len(repair_message_sequence(None, copy.deepcopy(after))) == 2


@pytest.mark.parametrize("reason", ["verification_required", "verify_hook_continue"])
def test_provisional_assistant_is_replaced_by_successor(reason: str) -> None:
    later = {"role": "assistant", "content": "final"}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "draft", "finish_reason": reason, "tool_calls": [tc("d")]},
        later,
    ]
    repair_message_sequence(None, messages)
    assert messages == [{"role": "user", "content": "q"}, later]
    assert messages[1] is later


def test_stray_and_duplicate_tool_results_dropped() -> None:
    messages = [
        {"role": "tool", "content": "before anything", "tool_call_id": "c1"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [tc("c1"), tc("fc_2", call_id="call_2")]},
        {"role": "tool", "content": "r1", "tool_call_id": "c1"},
        {"role": "tool", "content": "dup", "tool_call_id": "c1"},
        {"role": "tool", "content": "r2", "tool_call_id": "call_2"},
        {"role": "tool", "content": "no id"},
        {"role": "tool", "content": "unknown", "tool_call_id": "zzz"},
    ]
    repair_message_sequence(None, messages)
    assert [m["content"] for m in messages] == ["q", "", "r1", "r2"]


def test_tool_result_matches_item_id_too() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [tc("fc_1", call_id="call_1")]},
        {"role": "tool", "content": "by item id", "tool_call_id": "fc_1"},
    ]
    assert len(repair_message_sequence(None, messages)) == 2


def test_user_turn_closes_tool_ids_and_system_does_not() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [tc("a"), tc("b")]},
        {"role": "system", "content": "note"},
        {"role": "tool", "content": "A", "tool_call_id": "a"},
        {"role": "user", "content": "interrupt"},
        {"role": "tool", "content": "B", "tool_call_id": "b"},
    ]
    repair_message_sequence(None, messages)
    assert [m["content"] for m in messages] == ["", "note", "A", "interrupt"]


def test_newer_assistant_resets_known_ids() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [tc("a")]},
        {"role": "tool", "content": "A", "tool_call_id": "a"},
        {"role": "assistant", "content": "", "tool_calls": [tc("b")]},
        {"role": "tool", "content": "late A", "tool_call_id": "a"},
    ]
    repair_message_sequence(None, messages)
    assert [m["content"] for m in messages] == ["", "A", ""]


def test_non_dict_tool_calls_entries_are_ignored() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": ["junk", None, tc("ok")]},
        {"role": "tool", "content": "r", "tool_call_id": "ok"},
    ]
    assert len(repair_message_sequence(None, messages)) == 2


def test_user_merge_rules() -> None:
    messages = [
        {"role": "user", "content": "a", "api_content": "a + memory", "timestamp": 1},
        {"role": "user", "content": "", "timestamp": 2},
        {"role": "user", "content": "b", "timestamp": 3},
    ]
    repair_message_sequence(None, messages)
    assert messages == [{"role": "user", "content": "a\n\nb", "timestamp": 1}]


def test_user_merge_into_empty_and_missing_content() -> None:
    messages = [{"role": "user", "content": ""}, {"role": "user"}, {"role": "user", "content": "x"}]
    repair_message_sequence(None, messages)
    assert messages == [{"role": "user", "content": "x"}]


def test_multimodal_users_are_not_merged() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "u"}}]
    messages = [
        {"role": "user", "content": "a", "api_content": "kept"},
        {"role": "user", "content": parts},
        {"role": "user", "content": "b"},
    ]
    snapshot = copy.deepcopy(messages)
    repair_message_sequence(None, messages)
    assert messages == snapshot


def test_assistant_merge_happens_before_orphan_check() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [tc("a")]},
        {"role": "assistant", "content": "", "tool_calls": [tc("b")]},
        {"role": "tool", "content": "A", "tool_call_id": "a"},
        {"role": "tool", "content": "B", "tool_call_id": "b"},
    ]
    repair_message_sequence(None, messages)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool"]


def test_users_merge_after_orphan_tool_between_them_is_dropped() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "tool", "content": "orphan", "tool_call_id": "x"},
        {"role": "user", "content": "b"},
    ]
    repair_message_sequence(None, messages)
    assert messages == [{"role": "user", "content": "a\n\nb"}]


def test_surrogates_and_unicode_survive_merges() -> None:
    messages = [
        {"role": "user", "content": "\ud800 \U0001f600"},
        {"role": "user", "content": "\u4e2d\u6587 \udfff"},
        {"role": "assistant", "content": "\u3000x\u3000"},
        {"role": "assistant", "content": "y\u0301"},
    ]
    repair_message_sequence(None, messages)
    assert messages == [
        {"role": "user", "content": "\ud800 \U0001f600\n\n\u4e2d\u6587 \udfff"},
        {"role": "assistant", "content": "x\ny\u0301"},
    ]
