"""Compression lineage: tips, resume targets, resume transcripts, orphan recovery, lineage-wide flags."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hermes_state import SessionDB, SessionResumeTooLargeError
from tests.test_compression import raw_exec

# PostgreSQL: this module's methods are not on that backend yet (issue 11 phase 2); drop the mark when they are.
pytestmark = pytest.mark.backends("sqlite")


async def rotate(db: SessionDB, parent: str, child: str, *contents: str) -> None:
    """Publish ``child`` as the compression continuation of ``parent``."""
    messages = [{"role": "user", "content": c} for c in contents or (f"summary of {parent}",)]
    await db.publish_compression_child(
        parent_session_id=parent, child_session_id=child, source="cli", messages=messages,
        require_compression_lease=False,
    )


async def fork(db: SessionDB, parent: str, child: str, kind: str) -> None:
    """A child linked to ``parent`` that is not a continuation of it."""
    if kind == "tool":
        await db.create_session(child, "tool", parent_session_id=parent)
    else:
        await db.create_session(child, "cli", parent_session_id=parent, model_config={kind: parent})


FORK_KINDS = ("tool", "_branched_from", "_delegate_from", "_reset_from")


# ------------------------------------------------------------------------- tips


async def test_tip_follows_the_chain(store: SessionDB) -> None:
    await store.create_session("a", "cli")
    await rotate(store, "a", "b")
    await rotate(store, "b", "c")
    for sid in ("a", "b", "c"):
        assert await store.get_compression_tip(sid) == "c"
    assert await store.get_compression_tip("ghost") == "ghost"
    await store.create_session("plain", "cli")
    await store.create_session("kid", "cli", parent_session_id="plain")
    assert await store.get_compression_tip("plain") == "plain"  # not ended by compression


async def test_tip_prefers_compressed_then_open_then_freshest(store: SessionDB) -> None:
    await store.create_session("p", "cli")
    await store.end_session("p", "compression")
    now = time.time()
    for sid, stamp in (("old-open", now - 100), ("new-open", now - 50), ("closed", now)):
        await store.create_session(sid, "cli", parent_session_id="p")
        await store.append_message(sid, "user", sid, timestamp=stamp)
    await store.end_session("closed", "agent_close")
    assert await store.get_compression_tip("p") == "new-open"
    await store.append_message("old-open", "user", "fresh", timestamp=now + 10)
    assert await store.get_compression_tip("p") == "old-open"
    await store.end_session("new-open", "compression")
    await store.create_session("deeper", "cli", parent_session_id="new-open")
    assert await store.get_compression_tip("p") == "deeper"


@pytest.mark.parametrize("kind", FORK_KINDS)
async def test_tip_and_resume_never_follow_forks(store: SessionDB, kind: str) -> None:
    await store.create_session("p", "cli")
    await store.append_message("p", "user", "hello")
    await store.end_session("p", "compression")
    await fork(store, "p", "f", kind)
    await store.append_message("f", "user", "forked work")
    assert await store.get_compression_tip("p") == "p"
    assert await store.resolve_resume_session_id("p") == "p"
    assert await store.get_compression_lineage("f") == ["f"]
    assert await store.find_live_compression_child("p") is None
    assert await store.reopen_orphaned_compression_session("p")  # a fork is no continuation


async def test_walks_survive_a_parent_cycle(store: SessionDB, db_path: Path) -> None:
    await store.create_session("x", "cli")
    await rotate(store, "x", "y")
    await store.end_session("y", "compression")
    raw_exec(db_path, "UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
    assert await store.get_compression_tip("x") in {"x", "y"}
    assert set(await store.get_compression_lineage("x")) <= {"x", "y"}
    assert await store.get_conversation_root("x") in {"x", "y"}
    assert await store.resolve_resume_session_id("x") in {"x", "y"}
    assert await store.get_resume_message_count("x") == 1


# ------------------------------------------------------------- resume targets


async def test_resolve_resume_walks_plain_children_to_messages(store: SessionDB) -> None:
    await store.create_session("root", "cli")
    await store.create_session("mid", "cli", parent_session_id="root")
    await store.create_session("leaf", "cli", parent_session_id="mid")
    assert await store.resolve_resume_session_id("root") == "root"  # nothing anywhere has messages
    await store.append_message("mid", "user", "in the middle")
    assert await store.resolve_resume_session_id("root") == "mid"
    await store.append_message("leaf", "user", "deepest")
    assert await store.resolve_resume_session_id("root") == "leaf"
    await fork(store, "leaf", "branch", "_branched_from")
    await store.append_message("branch", "user", "elsewhere")
    assert await store.resolve_resume_session_id("root") == "leaf"
    assert await store.resolve_resume_session_id("") == ""


async def test_resolve_resume_goes_to_the_compression_tip_first(store: SessionDB) -> None:
    await store.create_session("p", "cli")
    await store.append_message("p", "user", "pre-compression turn")
    await rotate(store, "p", "c")
    assert await store.resolve_resume_session_id("p") == "c"
    assert await store.resolve_resume_session_id("c") == "c"


# -------------------------------------------------------------------- lineage


async def test_compression_lineage_root_to_tip(store: SessionDB) -> None:
    await store.create_session("a", "cli")
    await rotate(store, "a", "b")
    await rotate(store, "b", "c")
    for sid in ("a", "b", "c"):
        assert await store.get_compression_lineage(sid) == ["a", "b", "c"]
    assert await store.get_compression_lineage("ghost") == []
    await store.create_session("solo", "cli")
    assert await store.get_compression_lineage("solo") == ["solo"]
    # A second continuation of "b" (a lost race) is not the canonical lineage.
    await store.create_session("b-late", "cli", parent_session_id="b")
    assert await store.get_compression_lineage("b-late") == ["b-late"]


async def test_conversation_root_uses_any_parent_link(store: SessionDB) -> None:
    await store.create_session("root", "cli")
    await fork(store, "root", "branch", "_branched_from")
    await rotate(store, "branch", "cont")
    assert await store.get_conversation_root("cont") == "root"
    assert await store.get_conversation_root("root") == "root"
    assert await store.get_conversation_root("ghost") == "ghost"
    assert await store.get_conversation_root("") == ""


# ----------------------------------------------------------- resume transcripts


async def _two_segments(db: SessionDB) -> tuple[list[int], list[int]]:
    await db.create_session("p", "cli")
    parent_ids = [
        await db.append_message("p", "user", "deploy the app"),
        await db.append_message("p", "assistant", "deployed"),
        await db.append_message("p", "user", "now roll back"),
    ]
    await rotate(db, "p", "c", "now roll back", "also check logs")  # replays the last user turn
    child_ids = [m["id"] for m in await db.get_messages("c")]
    return parent_ids, child_ids


async def test_resume_conversations(store: SessionDB) -> None:
    parent_ids, child_ids = await _two_segments(store)
    model, display = await store.get_resume_conversations("c")
    # Model history: the tip only, alternation repaired (two user turns merged), with row ids.
    assert [m["role"] for m in model] == ["user"]
    assert model[0]["content"].split() == ["now", "roll", "back", "also", "check", "logs"]
    assert model[0]["_row_id"] == child_ids[0]
    assert model == await store.get_messages_as_conversation("c", repair_alternation=True, include_row_ids=True)
    # Display history: the whole chain, the replayed user turn shown once.
    assert [(m["content"], m["_row_id"]) for m in display] == [
        ("deploy the app", parent_ids[0]), ("deployed", parent_ids[1]), ("now roll back", parent_ids[2]),
        ("also check logs", child_ids[1]),
    ]
    assert display == await store.get_messages_as_conversation("c", include_ancestors=True, include_row_ids=True)
    prefix = await store.get_ancestor_display_prefix("c")
    assert prefix == [{k: v for k, v in m.items() if k != "_row_id"} for m in display[:3]]
    assert await store.get_ancestor_display_prefix("p") == []
    assert await store.get_resume_message_count("c") == 5
    assert await store.get_resume_message_count("p") == 3


async def test_resume_size_guard(store: SessionDB) -> None:
    await _two_segments(store)
    assert await store.assert_resume_safe("c") == 5
    assert await store.assert_resume_safe("c", max_messages=5) == 5
    assert await store.assert_resume_safe("c", max_messages=0) == 5  # guard off, still the count
    with pytest.raises(SessionResumeTooLargeError) as caught:
        await store.assert_resume_safe("c", max_messages=4)
    err = caught.value
    assert isinstance(err, ValueError)
    assert (err.session_id, err.message_count, err.limit) == ("c", 5, 4)
    assert str(err) == "session 'c' has at least 5 active messages; safe resume limit is 4"
    with pytest.raises(ValueError, match="max_messages must be non-negative"):
        await store.assert_resume_safe("c", max_messages=-1)


async def test_resume_limit_comes_from_config(db_path: Path, hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("sessions:\n  max_resume_messages: 4\n")
    db = SessionDB(db_path)
    try:
        await _two_segments(db)
        with pytest.raises(SessionResumeTooLargeError):
            await db.get_resume_conversations("c")
        with pytest.raises(SessionResumeTooLargeError):
            await db.assert_resume_safe("c")
        model, display = await db.get_resume_conversations("p")
        assert len(display) == 3 and len(model) == 3
    finally:
        await db.close()


# ----------------------------------------------------------- live child, orphans


async def test_find_live_compression_child(store: SessionDB) -> None:
    await store.create_session("p", "cli", system_prompt="SYS")
    assert await store.find_live_compression_child("p") is None  # not ended by compression
    await rotate(store, "p", "c")
    child = await store.find_live_compression_child("p")
    assert child is not None and child == await store.get_session("c")
    await store.create_session("c2", "cli", parent_session_id="p")
    assert await store.find_live_compression_child("p") is None  # ambiguous: fail closed
    await store.end_session("c2", "agent_close")
    assert (await store.find_live_compression_child("p") or {}).get("id") == "c"
    await store.end_session("c", "agent_close")
    assert await store.find_live_compression_child("p") is None
    assert await store.find_live_compression_child("") is None


async def test_reopen_orphaned_compression_session(store: SessionDB, db_path: Path) -> None:
    await store.create_session("p", "cli")
    assert not await store.reopen_orphaned_compression_session("p")  # still open
    await store.end_session("p", "compression")
    assert await store.try_acquire_compression_lock("p", "h", ttl_seconds=60)
    assert not await store.reopen_orphaned_compression_session("p")  # a live lease owns it
    raw_exec(db_path, "UPDATE compression_locks SET expires_at = ? WHERE session_id = 'p'", (time.time() - 1,))
    assert await store.reopen_orphaned_compression_session("p")
    session = await store.get_session("p")
    assert session is not None and session["ended_at"] is None and session["end_reason"] is None
    # The expired lease went with it, so its owner cannot refresh it back.
    assert not await store.refresh_compression_lock("p", "h")
    await store.append_message("p", "user", "writable again")
    await rotate(store, "p", "c")
    await store.end_session("c", "agent_close")
    assert not await store.reopen_orphaned_compression_session("p")  # a continuation exists
    assert not await store.reopen_orphaned_compression_session("ghost")
    assert not await store.reopen_orphaned_compression_session("")


async def test_finalize_orphaned_compression_sessions(store: SessionDB, db_path: Path) -> None:
    await store.create_session("p", "cli")
    await store.end_session("p", "compression")
    for sid in ("stale", "fresh", "empty", "billed"):
        await store.create_session(sid, "cli", parent_session_id="p")
        if sid != "empty":
            await store.append_message(sid, "user", "hi")
    await store.create_session("unrelated", "cli")
    await store.append_message("unrelated", "user", "hi")
    week_ago = time.time() - 8 * 86400
    raw_exec(db_path, "UPDATE sessions SET started_at = ? WHERE id <> 'fresh'", (week_ago,))
    await store.update_token_counts("billed", input_tokens=5, api_call_count=1)
    assert await store.finalize_orphaned_compression_sessions() == 1
    ends = {sid: (await store.get_session(sid) or {}).get("end_reason")
            for sid in ("stale", "fresh", "empty", "billed", "unrelated")}
    assert ends == {"stale": "orphaned_compression", "fresh": None, "empty": None, "billed": None, "unrelated": None}
    assert len(await store.get_messages("stale")) == 1
    assert await store.finalize_orphaned_compression_sessions() == 0


# ------------------------------------------------------------ lineage-wide flags


async def _lineage_with_neighbours(db: SessionDB) -> None:
    await db.create_session("a", "cli")
    await rotate(db, "a", "b")
    await rotate(db, "b", "c")
    await fork(db, "b", "branch", "_branched_from")
    await db.create_session("other", "cli")


async def test_archive_and_pin_apply_to_the_whole_lineage(store: SessionDB) -> None:
    await _lineage_with_neighbours(store)
    assert await store.set_session_archived("c", True)
    flags = {sid: (await store.get_session(sid) or {})["archived"] for sid in ("a", "b", "c", "branch", "other")}
    assert flags == {"a": 1, "b": 1, "c": 1, "branch": 0, "other": 0}
    assert await store.set_session_pinned("a", True)
    assert [(await store.get_session(s) or {})["pinned"] for s in ("a", "b", "c", "branch")] == [1, 1, 1, 0]
    assert await store.set_session_archived("b", False)
    assert [(await store.get_session(s) or {})["archived"] for s in ("a", "b", "c")] == [0, 0, 0]
    assert not await store.set_session_archived("ghost", True)
    assert not await store.set_session_pinned("ghost", True)


async def test_read_marks_and_unread(store: SessionDB) -> None:
    await _lineage_with_neighbours(store)
    row = await store.get_session("c")
    assert row is not None and not SessionDB.session_unread(row)  # never marked
    before = time.time()
    assert await store.set_session_read("b")
    for sid in ("a", "b", "c"):
        row = await store.get_session(sid)
        assert row is not None and row["last_read_at"] >= before
    assert (await store.get_session("branch") or {})["last_read_at"] is None
    row = await store.get_session("c")
    assert row is not None and not SessionDB.session_unread(row)
    assert SessionDB.session_unread({**row, "last_active": row["last_read_at"] + 5})
    assert await store.set_session_read("c", read=False)
    row = await store.get_session("a")
    assert row is not None and row["last_read_at"] == 0.0 and SessionDB.session_unread(row)
    assert not await store.set_session_read("ghost")
