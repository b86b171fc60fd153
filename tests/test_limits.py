"""Huge payloads, odd Unicode and a full database: clear errors, nothing stored is lost."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.sqlite.driver import run_on


async def test_large_payload_round_trips(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    big = "ß🙂" * (4 * 1024 * 1024)  # 8 M characters, about 24 MB of UTF-8
    mid = await store.append_message("s", "user", big)
    rows = await store.get_messages("s")
    assert [r["id"] for r in rows] == [mid]
    assert rows[0]["content"] == big


@pytest.mark.parametrize(
    "text",
    [
        "",
        "RTL \u202e override and zero\u200bwidth",
        "emoji 👩‍👩‍👧‍👦 and flags 🇯🇵",
        "mixed 中文 日本語 한국어 العربية",
        "'; DROP TABLE messages; --",
        "%_\\ LIKE wildcards",
    ],
)
async def test_odd_text_round_trips(store: SessionDB, text: str) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", text, tool_name=text or None)
    rows = await store.get_messages("s")
    assert rows[0]["content"] == text
    assert rows[0]["tool_name"] == (text or None)


@pytest.mark.backends("sqlite")  # NUL outside message content: refused on PostgreSQL (docs/postgres.md differences)
async def test_nul_text_round_trips_in_content_and_tool_name(store: SessionDB) -> None:
    await test_odd_text_round_trips(store, "\x00 NUL inside")


@pytest.mark.backends("postgres")
async def test_nul_in_tool_name_is_refused_at_the_call_site_on_postgres(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    with pytest.raises(ValueError, match="tool_name must not contain NUL"):
        await store.append_message("s", "tool", "x", tool_name="a\x00b")
    assert await store.get_messages("s") == []


async def test_nul_text_round_trips_in_content(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "\x00 NUL inside")
    assert (await store.get_messages("s"))[0]["content"] == "\x00 NUL inside"


async def _set_max_pages(db: SessionDB, pages: int | None) -> int:
    """Cap (or with None, uncap) the writer connection's database size; returns the page count."""

    def apply(conn: object) -> int:
        current = conn.execute("PRAGMA page_count").fetchone()[0]  # type: ignore[attr-defined]
        limit = 2147483646 if pages is None else current + pages
        conn.execute(f"PRAGMA max_page_count={limit}")  # type: ignore[attr-defined]
        return int(current)

    return await run_on(db._backend._writer_conn, apply)  # type: ignore[attr-defined]


@pytest.mark.backends("sqlite")  # caps the SQLite file with PRAGMA max_page_count
async def test_full_database_fails_the_big_write_alone(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    for i in range(20):
        await store.append_message("s", "user", f"before {i}")
    await _set_max_pages(store, 8)  # room for small rows, not for a large one
    huge = "x" * (2 * 1024 * 1024)
    results = await asyncio.gather(
        store.append_message("s", "user", "small one"),
        store.append_message("s", "user", huge),
        store.append_message("s", "user", "small two"),
        return_exceptions=True,
    )
    assert isinstance(results[1], sqlite3.OperationalError)
    assert "full" in str(results[1])
    assert isinstance(results[0], int) and isinstance(results[2], int)
    contents = [r["content"] for r in await store.get_messages("s")]
    assert contents == [f"before {i}" for i in range(20)] + ["small one", "small two"]
    session = await store.get_session("s")
    assert session is not None and session["message_count"] == 22
    await _set_max_pages(store, None)
    await store.append_message("s", "user", huge)
    assert await store.message_count("s") == 23


async def test_zeroed_file_is_quarantined_and_replaced(db_path) -> None:
    from hermes_state import get_last_init_error

    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"\x00" * 8192)
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        assert await db.get_session("s") is not None
    finally:
        await db.close()
    backups = sorted(db_path.parent.glob("state.db.zeroed-*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes() == b"\x00" * 8192
    assert "zeroed" in (get_last_init_error() or "")


async def test_garbage_file_is_a_clear_error_and_left_alone(db_path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        await SessionDB(db_path).get_session("x")
    assert db_path.read_bytes() == b"this is not sqlite" * 100


async def test_repair_rebuilds_a_damaged_fts_index(db_path) -> None:
    from hermes_state import repair_state_db_schema
    from hermes_state.sqlite.driver import driver_module

    db = SessionDB(db_path)
    await db.create_session("s", "cli")
    for i in range(50):
        await db.append_message("s", "user", f"deployment note number {i}")
    await db.close()
    clean = await repair_state_db_schema(db_path, backup=False)
    assert clean["ok"] and clean["steps"] == [] and clean["backup"] is None

    conn = driver_module().connect(str(db_path), isolation_level=None)
    conn.execute("DELETE FROM messages_fts_data WHERE id > 10")  # drop index segments
    with pytest.raises(driver_module().DatabaseError):  # FTS5's own check sees the damage
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    conn.close()

    result = await repair_state_db_schema(db_path)
    assert result["ok"], result
    assert result["steps"][0] == "fts_rebuild"
    assert result["backup"] and Path(result["backup"]).exists()

    db = SessionDB(db_path)
    try:
        assert await db.message_count("s") == 50  # no transcript row lost
        hits = await db.search_messages("deployment", limit=100)
        assert len(hits) == 50
    finally:
        await db.close()
