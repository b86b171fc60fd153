"""A /branch session owns its transcript (upstream 2026-08, spec §3.8), on both backends.

A session whose ``model_config`` has a truthy ``_branched_from`` starts with
its own copy of the parent's turns, so the transcript views stop at it: the
conversation with ancestors, the resume display, the ancestor prefix, and
(unlike upstream, which left them counting the parent chain) the resume
size count and guard, which count exactly the rows a resume loads.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_state import SessionDB, SessionResumeTooLargeError


def texts(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages]


async def fork(db: SessionDB, marker: Any = "parent", *, key: str = "_branched_from") -> None:
    """Parent ``p`` said "before"; ``b`` forks with a copy of it; then ``p`` goes on with "after"."""
    await db.create_session("p", "cli")
    await db.append_message("p", "user", "before")
    await db.create_session("b", "cli", parent_session_id="p", model_config={key: marker, "note": 1})
    await db.append_message("b", "user", "before")
    await db.append_message("b", "assistant", "branch reply")
    await db.append_message("p", "assistant", "after")


async def test_branch_views_exclude_parent_rows_added_after_the_fork(store: SessionDB) -> None:
    await fork(store)
    assert texts(await store.get_messages_as_conversation("b", include_ancestors=True)) == ["before", "branch reply"]
    model, display = await store.get_resume_conversations("b")
    assert texts(model) == texts(display) == ["before", "branch reply"]
    assert await store.get_ancestor_display_prefix("b") == []
    # The parent is untouched by its branch.
    assert texts(await store.get_messages_as_conversation("p", include_ancestors=True)) == ["before", "after"]


async def test_resume_count_and_guard_count_what_a_resume_loads(store: SessionDB) -> None:
    await fork(store)
    assert await store.get_resume_message_count("b") == 2  # upstream counted the parent's 2 too
    assert await store.assert_resume_safe("b", max_messages=2) == 2
    with pytest.raises(SessionResumeTooLargeError):
        await store.assert_resume_safe("b", max_messages=1)
    # A plain child still resumes (and counts) its whole parent chain.
    await store.create_session("c", "cli", parent_session_id="p")
    await store.append_message("c", "user", "child turn")
    assert await store.get_resume_message_count("c") == 3
    with pytest.raises(SessionResumeTooLargeError):
        await store.assert_resume_safe("c", max_messages=2)
    _, display = await store.get_resume_conversations("c")
    assert texts(display) == ["before", "after", "child turn"]
    assert texts(await store.get_ancestor_display_prefix("c")) == ["before", "after"]


async def test_sessions_continuing_a_branch_stop_at_it(store: SessionDB) -> None:
    await fork(store)
    await store.end_session("b", "compression")
    await store.create_session("b2", "cli", parent_session_id="b")
    await store.append_message("b2", "user", "after compaction")
    expected = ["before", "branch reply", "after compaction"]
    assert texts(await store.get_messages_as_conversation("b2", include_ancestors=True)) == expected
    assert texts((await store.get_resume_conversations("b2"))[1]) == expected
    assert texts(await store.get_ancestor_display_prefix("b2")) == expected[:2]
    assert await store.get_resume_message_count("b2") == 3


@pytest.mark.parametrize("marker", ["", 0, False, None, [], {}])
async def test_a_falsy_marker_is_not_a_branch(store: SessionDB, marker: Any) -> None:
    await fork(store, marker)
    # The parent's rows belong to it, in id order (the replayed "before" is dropped, as for any child).
    expected = ["before", "branch reply", "after"]
    assert texts(await store.get_messages_as_conversation("b", include_ancestors=True)) == expected
    assert texts((await store.get_resume_conversations("b"))[1]) == expected
    assert await store.get_resume_message_count("b") == 4
    assert len(await store.get_ancestor_display_prefix("b")) == 2


@pytest.mark.parametrize("key", ["_delegate_from", "_reset_from"])
async def test_only_the_branch_marker_isolates(store: SessionDB, key: str) -> None:
    await fork(store, key=key)
    assert await store.get_resume_message_count("b") == 4
    assert texts(await store.get_ancestor_display_prefix("b")) == ["before", "after"]


async def test_a_model_config_that_is_not_json_is_not_a_branch(store: SessionDB) -> None:
    await fork(store)
    await store.update_session_meta("b", '{"_branched_from": "p"')  # stored as given, not JSON
    assert await store.get_resume_message_count("b") == 4
    await store.update_session_meta("b", '["_branched_from"]')  # JSON, but not an object
    assert await store.get_resume_message_count("b") == 4
    await store.update_session_meta("b", '{"_branched_from": "p"}')
    assert await store.get_resume_message_count("b") == 2
