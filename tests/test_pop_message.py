"""``pop_message``: removes exactly the newest active row, atomically, on real database files."""

from __future__ import annotations

import asyncio

import pytest

from hermes_state import CompressionSessionClosedError, SessionDB


async def test_pop_returns_and_removes_the_newest_row(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_message("s", "user", "first")
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    last_id = await store.append_message("s", "assistant", [{"type": "text", "text": "x"}], tool_calls=calls)
    popped = await store.pop_message("s")
    assert popped is not None
    assert popped["id"] == last_id
    assert popped["content"] == [{"type": "text", "text": "x"}]
    assert popped["tool_calls"] == calls
    assert [m["content"] for m in await store.get_messages("s")] == ["first"]
    session = await store.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (1, 0)
    popped = await store.pop_message("s")
    assert popped is not None and popped["content"] == "first"
    assert await store.pop_message("s") is None
    assert await store.pop_message("no-such-session") is None


@pytest.mark.backends("sqlite")  # archive_and_compact is not on PostgreSQL yet (issue 11 phase 2)
async def test_pop_skips_compacted_history(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_message("s", "user", "old")
    await store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    assert (await store.pop_message("s") or {}).get("content") == "summary"
    assert await store.pop_message("s") is None
    # The archived row stays on disk.
    assert [m["content"] for m in await store.get_messages("s", include_inactive=True)] == ["old"]


async def test_a_popped_row_leaves_the_search_index(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_message("s", "user", "kept marmalade")
    await store.append_message("s", "assistant", "popped marmalade")
    await store.pop_message("s")
    hits = await store.search_messages("marmalade")
    assert [h["snippet"] for h in hits] == ["kept >>>marmalade<<<"]


async def test_concurrent_pops_take_distinct_rows(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(40)])
    popped = await asyncio.gather(*(store.pop_message("s") for _ in range(25)))
    contents = [p["content"] for p in popped if p is not None]
    assert sorted(contents) == sorted(f"m{i}" for i in range(15, 40))
    assert [m["content"] for m in await store.get_messages("s")] == [f"m{i}" for i in range(15)]


async def test_pop_queued_after_an_append_removes_that_append(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_message("s", "user", "keep")
    append = asyncio.ensure_future(store.append_message("s", "user", "newest"))
    pop = asyncio.ensure_future(store.pop_message("s"))
    new_id, popped = await asyncio.gather(append, pop)
    assert popped is not None and popped["id"] == new_id


async def test_pop_refuses_a_session_closed_by_compression(store: SessionDB) -> None:
    await store.create_session("s", source="test")
    await store.append_message("s", "user", "kept")
    await store.end_session("s", "compression")
    with pytest.raises(CompressionSessionClosedError):
        await store.pop_message("s")
    assert [m["content"] for m in await store.get_messages("s")] == ["kept"]


async def test_pop_rejects_bad_ids_at_the_call_site(store: SessionDB) -> None:
    with pytest.raises(TypeError, match="session_id"):
        await store.pop_message(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_id"):
        await store.pop_message("  ")
