"""Compaction that never loses a concurrent append: the watermark commit (spec upstream-2026-08 §3.3-3.5, §7.1).

Both backends; counters include the compacted messages' tool calls and the
tail's (upstream's PostgreSQL dropped the former, §6.7c).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_state import SessionCompressionInProgressError

CALL = [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{\"q\": \"x\"}"}}]


async def _seed(store: Any, session_id: str = "s") -> None:
    await store.create_session(session_id, "cli")
    await store.append_message(session_id, "user", "first question")
    await store.append_message(session_id, "assistant", "first answer")


async def _live(store: Any, session_id: str = "s") -> list[Any]:
    return [m["content"] for m in await store.get_messages(session_id)]


async def test_the_watermark_names_the_newest_active_row(store: Any) -> None:
    assert await store.get_active_message_watermark("") == 0
    assert await store.get_active_message_watermark("unknown") == 0
    await store.create_session("s", "cli")
    assert await store.get_active_message_watermark("s") == 0
    first = await store.append_message("s", "user", "a")
    second = await store.append_message("s", "user", "b")
    assert await store.get_active_message_watermark("s") == second
    await store.rewind_to_message("s", second)  # only active rows count
    assert await store.get_active_message_watermark("s") == first
    with pytest.raises(TypeError):
        await store.get_active_message_watermark(5)


async def test_rows_appended_during_the_summary_follow_it(store: Any) -> None:
    await _seed(store)
    watermark = await store.get_active_message_watermark("s")
    # The slow summary call: meanwhile the conversation goes on.
    await store.append_message("s", "user", "concurrent question")
    await store.append_message("s", "assistant", None, tool_calls=CALL)
    summary = [{"role": "user", "content": "summary"}, {"role": "assistant", "content": "ok"}]
    assert await store.archive_and_compact("s", summary, watermark=watermark) == 4
    assert await _live(store) == ["summary", "ok", "concurrent question", None]
    conversation = await store.get_messages_as_conversation("s")
    assert [m["content"] for m in conversation][:3] == ["summary", "ok", "concurrent question"]
    session = await store.get_session("s")
    assert (session["message_count"], session["tool_call_count"]) == (4, 1)


async def test_the_clone_keeps_every_column_and_the_original_stays_archived(store: Any) -> None:
    await _seed(store)
    watermark = await store.get_active_message_watermark("s")
    call_id = await store.append_message(
        "s", "assistant", {"structured": [1, 2]}, tool_calls=CALL, reasoning="why", timestamp=1234.5,
        display_metadata={"k": "v"}, platform_message_id="p-1",
    )
    await store.append_message("s", "tool", b"\x00raw bytes", tool_call_id="c1", tool_name="grep", timestamp=1235.0)
    await store.archive_and_compact("s", [{"role": "user", "content": "summary"}], watermark=watermark)
    every = await store.get_messages("s", include_inactive=True)
    originals = [m for m in every if not m["active"] and m["id"] >= call_id]
    clones = [m for m in every if m["active"]][1:]  # after the summary
    assert [m["compacted"] for m in originals] == [1, 1]
    volatile = ("id", "active", "compacted")
    for original, clone in zip(originals, clones, strict=True):
        assert {k: v for k, v in clone.items() if k not in volatile} == {
            k: v for k, v in original.items() if k not in volatile
        }
    assert clones[0]["content"] == {"structured": [1, 2]} and clones[1]["content"] == b"\x00raw bytes"
    assert clones[1]["tool_name"] == "grep" and clones[1]["tool_call_id"] == "c1"


async def test_without_a_watermark_everything_is_archived(store: Any) -> None:
    await _seed(store)
    await store.append_message("s", "user", "late")
    assert await store.archive_and_compact("s", [{"role": "user", "content": "summary"}, {"role": "assistant", "content": "ok"}]) == 2
    assert await _live(store) == ["summary", "ok"]
    # A watermark at or above the newest row means no tail.
    newest = await store.get_active_message_watermark("s")
    assert await store.archive_and_compact("s", [{"role": "user", "content": "again"}], watermark=newest + 10) == 1
    assert await _live(store) == ["again"]


async def test_counters_count_the_summarys_tool_calls_and_the_tails(store: Any) -> None:
    await _seed(store)
    watermark = await store.get_active_message_watermark("s")
    await store.append_message("s", "assistant", None, tool_calls=CALL + CALL)
    summary = [{"role": "user", "content": "summary"}, {"role": "assistant", "content": None, "tool_calls": CALL}]
    assert await store.archive_and_compact("s", summary, watermark=watermark) == 3
    session = await store.get_session("s")
    assert (session["message_count"], session["tool_call_count"]) == (3, 3)


async def test_a_lost_compression_lease_refuses_the_commit_at_once(store: Any) -> None:
    await _seed(store)
    assert await store.try_acquire_compression_lock("s", "compressor", ttl_seconds=60)
    await store.release_compression_lock("s", "compressor")
    started = time.monotonic()
    with pytest.raises(SessionCompressionInProgressError, match="lost before commit"):
        await store.archive_and_compact("s", [{"role": "user", "content": "summary"}], lock_holder="compressor")
    assert time.monotonic() - started < 0.5  # no retry: a lost lease is permanent
    assert await _live(store) == ["first question", "first answer"]
    assert await store.try_acquire_compression_lock("s", "compressor", ttl_seconds=60)
    assert await store.archive_and_compact("s", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], lock_holder="compressor") == 2
    # An expired lease is a lost lease too.
    assert await store.try_acquire_compression_lock("s", "quick", ttl_seconds=0.05) is False  # still held by compressor
    await store.release_compression_lock("s", "compressor")
    assert await store.try_acquire_compression_lock("s", "quick", ttl_seconds=0.05)
    time.sleep(0.1)
    with pytest.raises(SessionCompressionInProgressError):
        await store.archive_and_compact("s", [{"role": "user", "content": "late"}], lock_holder="quick")


async def test_the_rotation_tail_follows_the_child(store: Any) -> None:
    await _seed(store, "p")
    assert await store.try_acquire_compression_lock("p", "compressor", ttl_seconds=60)
    watermark = await store.get_active_message_watermark("p")
    await store.append_message("p", "user", "mid-rotation question")
    ceiling = await store.get_active_message_watermark("p")
    await store.append_message("p", "assistant", "the compressor's own flush, already in the handoff")
    await store.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="cli",
        messages=[{"role": "user", "content": "handoff"}, {"role": "assistant", "content": "ok"}],
        compression_lock_holder="compressor", watermark=watermark, watermark_ceiling=ceiling,
    )
    assert await _live(store, "c") == ["handoff", "ok", "mid-rotation question"]
    child = await store.get_session("c")
    assert child["message_count"] == 3 and child["conversation_id"] == "p"
    parent = await store.get_session("p")
    assert parent["end_reason"] == "compression"
    assert len(await _live(store, "p")) == 4  # the parent keeps its rows
    # Without a ceiling every row above the watermark follows.
    await store.append_message("c", "user", "later")
    mark = await store.get_active_message_watermark("c") - 1
    await store.publish_compression_child(
        parent_session_id="c", child_session_id="d", source="cli", messages=[{"role": "user", "content": "h2"}],
        require_compression_lease=False, watermark=mark,
    )
    assert await _live(store, "d") == ["h2", "later"]


async def test_watermark_arguments_are_checked(store: Any) -> None:
    await _seed(store)
    for bad, error in (("1", TypeError), (1.5, TypeError), (2**63, ValueError), (True, TypeError)):
        with pytest.raises(error, match="watermark"):
            await store.archive_and_compact("s", [{"role": "user", "content": "x"}], watermark=bad)
    with pytest.raises(TypeError, match="watermark_ceiling"):
        await store.publish_compression_child(
            parent_session_id="s", child_session_id="c", source="cli", messages=[{"role": "user", "content": "x"}],
            require_compression_lease=False, watermark=0, watermark_ceiling="9",
        )
    with pytest.raises(TypeError, match="lock_holder"):
        await store.archive_and_compact("s", [{"role": "user", "content": "x"}], lock_holder=1)
    assert await _live(store) == ["first question", "first answer"]
    assert await store.get_session("c") is None
