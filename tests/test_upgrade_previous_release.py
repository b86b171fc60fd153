"""A state.db written by the previous release of hermes-state (0.1.0, before turn leases) opens and migrates in place.

``tests/fixtures/release-0.1.0-state.db`` was written through that release's
public API: a compression chain (``root`` -> ``tip``), a tool run forked from
the tip, a plain session, a pin, an auxiliary usage row, structured content.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hermes_state import SessionDB, SessionTurnLeaseLostError
from hermes_state.sqlite.driver import driver_module

from tests.conftest import FIXTURES


@pytest.fixture
def previous_db(tmp_path: Path) -> Path:
    target = tmp_path / "previous" / "state.db"
    target.parent.mkdir()
    shutil.copyfile(FIXTURES / "release-0.1.0-state.db", target)
    return target


def _columns(path: Path, table: str) -> list[str]:
    conn = driver_module().connect(str(path))
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


async def test_previous_release_file_migrates_in_place(previous_db: Path) -> None:
    assert "conversation_id" not in _columns(previous_db, "sessions")
    assert _columns(previous_db, "session_turn_leases") == []
    async with SessionDB(previous_db) as db:
        sessions = {sid: await db.get_session(sid) for sid in ("root", "tip", "tool-run", "solo")}
        assert {sid: row["conversation_id"] for sid, row in sessions.items()} == {
            "root": "root", "tip": "root", "tool-run": "tool-run", "solo": "solo"
        }
        assert {row["hidden"] for row in sessions.values()} == {0}
        assert (sessions["root"]["pinned"], sessions["tip"]["pinned"]) == (1, 1)
        assert (await db.storage_info())["schema_version"] == 25
        assert [m["content"] for m in await db.get_messages("tip")] == ["summary", {"structured": [1, 2]}]
        # The new features work on it.
        assert await db.try_acquire_session_turn_lease("root", "worker")
        await db.append_message("tip", "user", "fenced", turn_lease_holder="worker")
        with pytest.raises(SessionTurnLeaseLostError):
            await db.append_message("tip", "user", "stale", turn_lease_holder="someone-else")
        assert await db.set_session_hidden("tip", True)
        listed = {r["id"] for r in await db.list_sessions_rich()}
        assert "root" not in listed and "solo" in listed
    assert "conversation_id" in _columns(previous_db, "sessions")
    conn = driver_module().connect(str(previous_db))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    # Opening again changes nothing and finds the lease it left.
    async with SessionDB(previous_db) as db:
        assert not await db.try_acquire_session_turn_lease("tip", "another-worker")


async def test_a_file_of_upstreams_current_release_opens_with_its_leases_and_hidden_flags(anchor_db: Path) -> None:
    """Upstream 2026-08 adds ``sessions.hidden`` and a 4-column ``session_turn_leases``; both carry over."""
    import time

    conn = driver_module().connect(str(anchor_db), isolation_level=None)
    try:
        conn.execute("ALTER TABLE sessions ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0")
        conn.execute("UPDATE sessions SET hidden = 1 WHERE id = '20261102_090000_d4e5f6'")
        conn.execute(
            "CREATE TABLE session_turn_leases (conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
            "acquired_at REAL NOT NULL, expires_at REAL NOT NULL)"
        )
        conn.execute(
            "INSERT INTO session_turn_leases VALUES ('20261103_120000_0a0b0c', 'pid=4242:turn=t:platform=cli', ?, ?)",
            (time.time(), time.time() + 600),
        )
    finally:
        conn.close()
    async with SessionDB(anchor_db) as db:
        assert (await db.get_session("20261102_090000_d4e5f6"))["hidden"] == 1
        listed = {r["id"] for r in await db.list_sessions_rich(include_children=True)}
        assert "20261102_090000_d4e5f6" not in listed
        # Upstream's live lease (root of the rotated conversation) still holds, for its child too.
        child = "20261103_120000_0a0b0c_c"
        assert not await db.try_acquire_session_turn_lease(child, "newcomer")
        await db.append_message(child, "user", "by upstream's holder", turn_lease_holder="pid=4242:turn=t:platform=cli")
        with pytest.raises(SessionTurnLeaseLostError):
            await db.append_message(child, "user", "by someone else", turn_lease_holder="newcomer")
        (lease,) = await db.turn_leases()
        assert (lease["holder_host"], lease["holder_pid"]) == (None, None)  # upstream recorded no process
    assert "token" in _columns(anchor_db, "session_turn_leases")
