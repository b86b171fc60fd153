"""The stored conversation id, and the hidden flag that applies to a whole conversation (both backends).

A session is its own conversation unless it continues a parent that ended
by compression; forks (tool runs, /branch, delegates, reset children) start
their own. The id is set when a session is created or its parent ends by
compression, survives the deletion of the root, and is what the
archived/pinned/hidden/read flags and the turn leases share.
"""

from __future__ import annotations

from typing import Any

from .raw_sql import fetch_rows, is_postgres, raw_exec, store_target

HANDOFF = [{"role": "user", "content": "summary of what came before"}]


async def _conversation(store: Any, session_id: str) -> str | None:
    row = await store.get_session(session_id)
    return None if row is None else row["conversation_id"]


async def test_plain_sessions_and_compression_continuations(store: Any) -> None:
    await store.create_session("root", "cli")
    assert await _conversation(store, "root") == "root"
    await store.publish_compression_child(
        parent_session_id="root", child_session_id="tip", source="cli", messages=HANDOFF,
        require_compression_lease=False,
    )
    assert await _conversation(store, "tip") == "root"
    # The older hand-off: the child exists first, the parent ends by compression afterwards.
    await store.create_session("late", "cli", parent_session_id="tip")
    assert await _conversation(store, "late") == "late"
    await store.create_session("late-child", "cli", parent_session_id="late")
    await store.end_session("late", "compression")
    assert await _conversation(store, "late-child") == "late"
    await store.end_session("tip", "compression")
    assert {await _conversation(store, s) for s in ("root", "tip", "late", "late-child")} == {"root"}
    # A parent that ended for another reason keeps its children apart.
    await store.create_session("other", "cli")
    await store.end_session("other", "user_exit")
    await store.create_session("after-exit", "cli", parent_session_id="other")
    assert await _conversation(store, "after-exit") == "after-exit"


async def test_forks_are_conversations_of_their_own(store: Any) -> None:
    await store.create_session("root", "cli")
    await store.end_session("root", "compression")
    await store.create_session("tool-run", "tool", parent_session_id="root")
    await store.create_session("branch", "cli", parent_session_id="root", model_config={"_branched_from": "root"})
    await store.create_session("delegate", "cli", parent_session_id="root", model_config={"_delegate_from": "root"})
    await store.create_session("reset", "cli", parent_session_id="root", model_config={"_reset_from": "root"})
    # An explicit marker counts as a fork whatever its value, except JSON null (no marker).
    await store.create_session("empty-marker", "cli", parent_session_id="root", model_config={"_delegate_from": ""})
    await store.create_session("plain", "cli", parent_session_id="root")
    for fork in ("tool-run", "branch", "delegate", "reset", "empty-marker"):
        assert await _conversation(store, fork) == fork
    assert await _conversation(store, "plain") == "root"


async def test_deleting_the_root_keeps_the_tip_in_its_conversation(store: Any) -> None:
    await store.create_session("root", "cli")
    await store.publish_compression_child(
        parent_session_id="root", child_session_id="tip", source="cli", messages=HANDOFF,
        require_compression_lease=False,
    )
    assert await store.delete_session("root")
    tip = await store.get_session("tip")
    assert tip is not None and tip["parent_session_id"] is None
    assert tip["conversation_id"] == "root"


async def test_reopening_fills_ids_a_file_or_database_lacks(store: Any) -> None:
    await store.create_session("root", "cli")
    await store.create_session("child", "cli", parent_session_id="root")
    await store.end_session("root", "compression")
    await store.create_session("grandchild", "cli", parent_session_id="child")
    await store.end_session("child", "compression")
    await store.create_session("tool-run", "tool", parent_session_id="child")
    await store.close()
    # What a file or database written before the column existed holds: no ids at all.
    if is_postgres(store):
        await raw_exec(store, "ALTER TABLE sessions DISABLE TRIGGER USER")
        await raw_exec(store, "UPDATE sessions SET conversation_id = NULL")
        await raw_exec(store, "ALTER TABLE sessions ENABLE TRIGGER USER")
    else:
        await raw_exec(store, "UPDATE sessions SET conversation_id = NULL")
    reopened = type(store)(store_target(store))
    try:
        ids = {sid: await _conversation(reopened, sid) for sid in ("root", "child", "grandchild", "tool-run")}
        assert ids == {"root": "root", "child": "root", "grandchild": "root", "tool-run": "tool-run"}
        assert await fetch_rows(reopened, "SELECT id FROM sessions WHERE conversation_id IS NULL") == []
    finally:
        await reopened.close()


async def test_hidden_sessions_leave_the_default_listing_only(store: Any) -> None:
    await store.create_session("shown", "cli")
    await store.create_session("secret", "cli")
    await store.append_message("secret", "user", "still searchable")
    assert (await store.get_session("secret"))["hidden"] == 0
    assert await store.set_session_hidden("secret", True) is True
    assert await store.set_session_hidden("secret", True) is True  # already hidden: still a match
    assert (await store.get_session("secret"))["hidden"] == 1
    assert [r["id"] for r in await store.list_sessions_rich()] == ["shown"]
    assert {r["id"] for r in await store.list_sessions_rich(include_hidden=True)} == {"shown", "secret"}
    # Pinning does not bring a hidden session back into the default listing.
    await store.set_session_pinned("secret", True)
    assert [r["id"] for r in await store.list_sessions_rich(include_pinned=True)] == ["shown"]
    # Everything else still sees it.
    assert await store.session_count() == 2
    assert [h["session_id"] for h in await store.search_messages("searchable")] == ["secret"]
    assert (await store.get_messages("secret"))[0]["content"] == "still searchable"
    assert await store.set_session_hidden("secret", False) is True
    assert {r["id"] for r in await store.list_sessions_rich()} == {"shown", "secret"}
    assert await store.set_session_hidden("no-such-session", True) is False


async def test_hidden_applies_to_the_whole_conversation_and_not_to_forks(store: Any) -> None:
    await store.create_session("root", "cli")
    await store.create_session("branch", "cli", parent_session_id="root", model_config={"_branched_from": "root"})
    await store.publish_compression_child(
        parent_session_id="root", child_session_id="tip", source="cli", messages=HANDOFF,
        require_compression_lease=False,
    )
    assert await store.set_session_hidden("tip", True)
    hidden = {r[0] for r in await fetch_rows(store, "SELECT id FROM sessions WHERE hidden = 1")}
    assert hidden == {"root", "tip"}
    # The same definition for the other flags.
    assert await store.set_session_pinned("root", True)
    pinned = {r[0] for r in await fetch_rows(store, "SELECT id FROM sessions WHERE pinned = 1")}
    assert pinned == {"root", "tip"}


async def test_flag_arguments_are_checked(store: Any) -> None:
    import pytest

    await store.create_session("s", "cli")
    for method in (store.set_session_hidden, store.set_session_pinned, store.set_session_archived):
        with pytest.raises(TypeError, match="must be a bool"):
            await method("s", "yes")
    with pytest.raises(TypeError, match="include_hidden"):
        await store.list_sessions_rich(include_hidden="all")
    assert (await store.get_session("s"))["hidden"] == 0
