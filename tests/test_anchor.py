"""A state.db written by async-hermes-agent opens here and reads back the same values."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB

from tests.conftest import FIXTURES

EXPECTED: dict[str, Any] = json.loads((FIXTURES / "anchor-v25-expected.json").read_text())
SESSION_IDS = [key for key in EXPECTED if "(" not in key]


def _jsonable(value: Any) -> Any:
    # The expectations went through JSON; compare what we return the same way.
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("session_id", SESSION_IDS)
async def test_anchor_session_reads_match(anchor_db: Path, session_id: str) -> None:
    expected = EXPECTED[session_id]
    db = SessionDB(anchor_db)
    try:
        assert _jsonable(await db.get_session(session_id)) == expected["get_session"]
        assert _jsonable(await db.get_messages(session_id)) == expected["get_messages"]
        assert _jsonable(await db.get_messages(session_id, include_inactive=True)) == expected[
            "get_messages_include_inactive"
        ]
        assert _jsonable(await db.get_messages_as_conversation(session_id)) == expected["get_messages_as_conversation"]
        # Key order is part of the contract (dict(row) in column order).
        assert list((await db.get_session(session_id)) or {}) == list(expected["get_session"])
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
