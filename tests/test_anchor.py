"""A state.db written by async-hermes-agent opens here and reads back the same values."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import CompressionSessionClosedError, SessionDB

from tests.conftest import FIXTURES

EXPECTED: dict[str, Any] = json.loads((FIXTURES / "anchor-v25-expected.json").read_text())
SESSION_IDS = [key for key in EXPECTED if "(" not in key]


def _jsonable(value: Any) -> Any:
    # The expectations went through JSON; compare what we return the same way.
    return json.loads(json.dumps(value))


def _expected_session(session_id: str) -> dict[str, Any]:
    """The anchor's ``get_session`` row plus the two columns added since (upstream's ``hidden``, our
    stored conversation id), which the opening migration fills: a plain session is its own conversation,
    a compression continuation shares its root's."""
    row = dict(EXPECTED[session_id]["get_session"])
    parent = row.get("parent_session_id")
    continues = parent is not None and EXPECTED.get(parent, {}).get("get_session", {}).get("end_reason") == "compression"
    row["hidden"] = 0
    row["conversation_id"] = parent if continues else session_id
    return row


@pytest.mark.parametrize("session_id", SESSION_IDS)
async def test_anchor_session_reads_match(anchor_db: Path, session_id: str) -> None:
    expected = EXPECTED[session_id]
    db = SessionDB(anchor_db)
    try:
        assert _jsonable(await db.get_session(session_id)) == _expected_session(session_id)
        assert _jsonable(await db.get_messages(session_id)) == expected["get_messages"]
        assert _jsonable(await db.get_messages(session_id, include_inactive=True)) == expected[
            "get_messages_include_inactive"
        ]
        assert _jsonable(await db.get_messages_as_conversation(session_id)) == expected["get_messages_as_conversation"]
        # Key order is part of the contract (dict(row) in column order).
        assert list((await db.get_session(session_id)) or {}) == list(_expected_session(session_id))
    finally:
        await db.close()


async def test_anchor_file_keeps_working(anchor_db: Path) -> None:
    db = SessionDB(anchor_db)
    try:
        sid = "20261102_090000_d4e5f6"
        before = await db.get_session(sid)
        assert before is not None
        new_id = await db.append_message(sid, "user", "follow-up after opening the anchor file")
        rows = await db.get_messages(sid)
        assert rows[-1]["id"] == new_id
        assert rows[-1]["content"] == "follow-up after opening the anchor file"
        after = await db.get_session(sid)
        assert after is not None and after["message_count"] == before["message_count"] + 1
        info = await db.storage_info()
        assert info["schema_version"] == 25
        assert info["fts"] == "current"
    finally:
        await db.close()
    with sqlite3.connect(anchor_db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The FTS index still answers for the new row (triggers kept working).
        hits = conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'anchor'"
        ).fetchall()
        assert [h[0] for h in hits] == [new_id]


async def test_anchor_read_only_store_reads_without_writing(anchor_db: Path) -> None:
    before = anchor_db.read_bytes()
    db = SessionDB(anchor_db, read_only=True)
    try:
        session = await db.get_session("20261101_101500_a1b2c3")
        assert session is not None and session["title"] == "Docker deploy failure"
        with pytest.raises(sqlite3.OperationalError, match="attempt to write a readonly database"):
            await db.append_message("20261101_101500_a1b2c3", "user", "nope")
    finally:
        await db.close()
    assert anchor_db.read_bytes() == before


async def test_anchor_compression_lineage(anchor_db: Path) -> None:
    parent, child = "20261103_120000_0a0b0c", "20261103_120000_0a0b0c_c"
    db = SessionDB(anchor_db)
    try:
        assert await db.get_compression_tip(parent) == EXPECTED[f"get_compression_tip('{parent}')"]
        assert await db.get_compression_tip(child) == child
        assert await db.resolve_resume_session_id(parent) == child
        assert await db.get_compression_lineage(parent) == [parent, child]
        assert await db.get_compression_lineage(child) == [parent, child]
        assert await db.get_conversation_root(child) == parent
        live = await db.find_live_compression_child(parent)
        assert live is not None and live["id"] == child
        assert not await db.reopen_orphaned_compression_session(parent)
        model, display = await db.get_resume_conversations(child)
        assert [m["content"] for m in model] == ["compressed continuation", "continuing"]
        assert [m["content"] for m in display] == ["start a long task", "compressed continuation", "continuing"]
        with pytest.raises(CompressionSessionClosedError):
            await db.append_message(parent, "user", "into the closed parent")
        # A further rotation from the reference's continuation works on this file.
        assert await db.try_acquire_compression_lock(child, "pid=0:task=t:agent=a:nonce=00000000")
        await db.publish_compression_child(
            parent_session_id=child, child_session_id=f"{child}_2", source="cli",
            messages=[{"role": "user", "content": "second summary"}],
            compression_lock_holder="pid=0:task=t:agent=a:nonce=00000000",
        )
        assert await db.get_compression_tip(parent) == f"{child}_2"
        assert await db.get_compression_lineage(parent) == [parent, child, f"{child}_2"]
    finally:
        await db.close()


async def test_anchor_in_place_compaction(anchor_db: Path) -> None:
    sid = "20261102_090000_d4e5f6"  # the reference already compacted this session once
    db = SessionDB(anchor_db)
    try:
        before = await db.get_messages(sid, include_inactive=True)
        assert [(m["id"], m["active"], m["compacted"]) for m in before] == [
            (m["id"], m["active"], m["compacted"]) for m in EXPECTED[sid]["get_messages_include_inactive"]
        ]
        summary = [
            {"role": "user", "content": "[CONTEXT SUMMARY]: deployment notes, twice compacted"},
            {"role": "assistant", "content": "Noted.", "reasoning_details": "kept-as-json-string"},
        ]
        assert await db.archive_and_compact(sid, summary, {"compacted_by": "hermes-state"}) == 2
        active = await db.get_messages(sid)
        assert [m["content"] for m in active] == [m["content"] for m in summary]
        assert active[1]["reasoning_details"] == json.dumps("kept-as-json-string")
        everything = await db.get_messages(sid, include_inactive=True)
        old_ids = {m["id"] for m in before}
        assert all((m["active"], m["compacted"]) == (0, 1) for m in everything if m["id"] in old_ids)
        session = await db.get_session(sid)
        assert session is not None
        assert (session["message_count"], session["tool_call_count"]) == (2, 0)
        assert json.loads(session["model_config"]) == {"compacted_by": "hermes-state"}
        assert await db.message_count(sid) == len(before) + 2
    finally:
        await db.close()
    with sqlite3.connect(anchor_db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Rows from both compactions stay in the full-text index.
        hits = {h[0] for h in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'deployment'")}
        assert {6, 8, 10, 12} <= hits and max(hits) > 16


@pytest.mark.parametrize(
    ("label", "kwargs"),
    [
        ("search_messages('docker')", {"query": "docker"}),
        ("search_messages('deployment', role_filter=['user'])", {"query": "deployment", "role_filter": ["user"]}),
        ("search_messages('你好世界')", {"query": "你好世界"}),
    ],
)
async def test_anchor_search_matches_reference(anchor_db: Path, label: str, kwargs: dict[str, Any]) -> None:
    # Exact rows, order, snippets and context windows as the reference returned them.
    db = SessionDB(anchor_db)
    try:
        hits = await db.search_messages(**kwargs)
        assert _jsonable(hits) == EXPECTED[label]
        assert [list(hit) for hit in hits] == [list(row) for row in EXPECTED[label]]
    finally:
        await db.close()
