"""Damaged files (issue 10, item 6): the first "malformed" stops writes, names the repair, and the repair salvages.

Every case damages a real file on disk the way a crash, a bad disk or a bad
copy does: bytes overwritten inside a page of the transcript table, or the
file cut short.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from hermes_state import DatabaseMalformedError, SessionDB, classify_persistence_error, repair_state_db_schema
from hermes_state.sqlite.driver import driver_module

ROWS = 400


def raw(path: Path) -> sqlite3.Connection:
    return closing(driver_module().connect(str(path), isolation_level=None))  # type: ignore[return-value]


def marker(i: int) -> str:
    # Upper case: the FTS tokenizers fold case, so these bytes exist only in the messages table.
    return f"ROWMARK{i:05d}Q"


async def make_file(path: Path) -> None:
    """Sessions "s" (ROWS messages) and "t" (one message), closed so the file holds everything."""
    db = SessionDB(path)
    try:
        await db.create_session("s", "cli")
        await db.create_session("t", "cli")
        await db.append_messages_batch(
            "s", [{"role": "user", "content": f"{marker(i)} deployment note " + "x" * 200} for i in range(ROWS)]
        )
        await db.append_message("t", "user", "other session")
    finally:
        await db.close()


def page_size(path: Path) -> int:
    with raw(path) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def page_of(path: Path, needle: str) -> int:
    """Index (from 0) of the page holding the first copy of ``needle``."""
    return path.read_bytes().index(needle.encode()) // page_size(path)


def root_page_of(path: Path, table: str) -> int:
    with raw(path) as conn:
        return int(conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]) - 1


def smash_page(path: Path, page_index: int) -> None:
    size = page_size(path)
    with open(path, "r+b") as fh:
        fh.seek(page_index * size)
        fh.write(b"\xff" * size)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def remedy_named(exc: BaseException) -> None:
    text = str(exc)
    assert "repair_state_db_schema" in text and "doctor --repair" in text
    assert "malformed" in text
    assert classify_persistence_error(exc) == "corrupt"


async def test_damaged_page_stops_writes_and_repair_salvages_the_rest(db_path: Path) -> None:
    await make_file(db_path)
    smash_page(db_path, page_of(db_path, marker(200)))

    db = SessionDB(db_path)
    try:
        # Opening does not scan the file; the untouched session still reads.
        assert [m["content"] for m in await db.get_messages("t")] == ["other session"]
        with pytest.raises(DatabaseMalformedError) as caught:
            await db.get_messages("s")
        remedy_named(caught.value)
        assert isinstance(caught.value, sqlite3.DatabaseError) and caught.value.path == str(db_path)
        changes = db._backend._writer_conn.total_changes  # type: ignore[attr-defined]
        # From now on every write is refused at the call site, nothing is queued.
        for attempt in (
            db.append_message("t", "user", "after the damage"),
            db.create_session("u", "cli"),
            db.set_session_title("t", "renamed"),
        ):
            with pytest.raises(DatabaseMalformedError) as refused:
                await attempt
            remedy_named(refused.value)
        assert db._actor.commands == 0  # type: ignore[attr-defined]
        assert db._backend._writer_conn.total_changes == changes  # type: ignore[attr-defined]
    finally:
        await db.close()
    before = digest(db_path)

    report = await repair_state_db_schema(db_path)
    assert report["ok"], report
    assert report["steps"][-1] == "salvage"
    backup = Path(report["backup"])
    # The reference's keys for the same facts.
    assert report["repaired"] is True and report["strategy"] == "salvage" and report["error"] is None
    assert report["backup_path"] == report["backup"]
    assert backup.exists() and digest(backup) == before
    lost = ROWS + 1 - report["recovered"]["messages"]
    assert 0 < lost < 40  # one page of rows, not the table
    assert report["unreadable"]["messages"] and report["recovered"]["sessions"] == 2
    assert report["placeholder_sessions"] == 0

    db = SessionDB(db_path)
    try:
        contents = [m["content"] for m in await db.get_messages("s")]
        assert len(contents) == ROWS - lost
        assert contents[0].startswith(marker(0)) and contents[-1].startswith(marker(ROWS - 1))
        assert not any(c.startswith(marker(200)) for c in contents)
        assert len(await db.search_messages("deployment", limit=1000)) == ROWS - lost
        new_id = await db.append_message("t", "user", "after the repair")
        assert new_id > max(m["id"] for m in await db.get_messages("s"))
    finally:
        await db.close()
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


async def test_damage_met_inside_a_batch_fails_its_neighbours_too(db_path: Path) -> None:
    await make_file(db_path)
    # The newest rows' page: every append lands there.
    smash_page(db_path, page_of(db_path, marker(ROWS - 1)))
    db = SessionDB(db_path)
    try:
        await db.get_session("t")  # open first, so the appends below queue together
        changes = db._backend._writer_conn.total_changes  # type: ignore[attr-defined]
        results = await asyncio.gather(
            db.append_message("t", "user", "lands on the damaged page"),
            db.set_session_title("t", "a neighbour that touches only sound pages"),
            db.create_session("u", "cli"),
            return_exceptions=True,
        )
        assert all(isinstance(r, DatabaseMalformedError) for r in results), results
        assert db._backend._writer_conn.total_changes == changes  # type: ignore[attr-defined]
    finally:
        await db.close()


async def test_file_cut_in_half_is_refused_and_repair_reports_what_survived(db_path: Path) -> None:
    await make_file(db_path)
    size = db_path.stat().st_size
    os.truncate(db_path, size // 2)

    db = SessionDB(db_path)
    try:
        with pytest.raises(DatabaseMalformedError) as caught:
            await db.get_messages("s")
        remedy_named(caught.value)
        with pytest.raises(DatabaseMalformedError):
            await db.append_message("t", "user", "into a half file")
    finally:
        await db.close()

    report = await repair_state_db_schema(db_path)
    assert report["ok"], report
    recovered = report["recovered"]["messages"]
    assert 0 < recovered < ROWS + 1
    assert Path(report["backup"]).stat().st_size == size // 2

    db = SessionDB(db_path)
    try:
        assert await db.message_count() == recovered
        await db.append_message("t", "user", "after the repair")  # the store writes again
    finally:
        await db.close()


async def test_read_only_store_reports_damage_with_the_remedy(db_path: Path) -> None:
    await make_file(db_path)
    smash_page(db_path, page_of(db_path, marker(100)))
    before = digest(db_path)
    ro = SessionDB(db_path, read_only=True)
    try:
        with pytest.raises(DatabaseMalformedError) as caught:
            await ro.get_messages("s")
        remedy_named(caught.value)
    finally:
        await ro.close()
    assert digest(db_path) == before


async def test_lost_session_row_keeps_its_messages_under_a_placeholder(db_path: Path) -> None:
    db = SessionDB(db_path)
    try:
        await db.create_session("kept", "cli")
        await db.create_session("SESSIONROWMARKERQ", "cli", model="m")
        await db.append_messages_batch("SESSIONROWMARKERQ", [{"role": "user", "content": f"line {i}"} for i in range(5)])
    finally:
        await db.close()
    # Damage the sessions-table page (the id's other copy lives in its index page).
    smash_page(db_path, root_page_of(db_path, "sessions"))

    report = await repair_state_db_schema(db_path, backup=False)
    assert report["ok"], report
    assert report["placeholder_sessions"] == 1 and report["recovered"]["messages"] == 5
    assert report["backup"] and Path(report["backup"]).exists()  # the damaged file is kept anyway

    db = SessionDB(db_path)
    try:
        session = await db.get_session("SESSIONROWMARKERQ")
        assert session is not None and session["source"] == "recovered"
        assert [m["content"] for m in await db.get_messages("SESSIONROWMARKERQ")] == [f"line {i}" for i in range(5)]
    finally:
        await db.close()


async def test_damaged_index_page_alone_still_fails_open(db_path: Path) -> None:
    """Damage inside the FTS index is not file damage: writes go on (spec §1.5.4)."""
    await make_file(db_path)
    smash_page(db_path, root_page_of(db_path, "messages_fts_data"))
    db = SessionDB(db_path)
    try:
        await db.append_message("t", "user", "written after index damage")
        assert len(await db.get_messages("s")) == ROWS
    finally:
        await db.close()


async def test_file_cut_to_its_first_pages_fails_at_open_and_is_left_as_it_is(db_path: Path) -> None:
    await make_file(db_path)
    os.truncate(db_path, 2 * page_size(db_path))
    before = digest(db_path)
    db = SessionDB(db_path)
    try:
        with pytest.raises(DatabaseMalformedError) as caught:
            await db.get_session("t")  # the first call opens the file
        remedy_named(caught.value)
    finally:
        await db.close()
    assert digest(db_path) == before

    report = await repair_state_db_schema(db_path)
    assert not report["ok"]
    assert report["steps"][-1].startswith("salvage failed: no transcript table")
    assert digest(Path(report["backup"])) == before and digest(db_path) == before
    assert not list(db_path.parent.glob("state.db.salvage-*"))  # no half-made file left behind


async def test_a_schema_row_written_twice_is_dropped_and_nothing_else_changes(db_path: Path) -> None:
    """Every statement fails on such a file ("table messages_fts already exists"); the repair drops the
    exact copy (the reference's ``dedup_schema``), not the file's rows, and keeps a backup."""
    await make_file(db_path)
    with raw(db_path) as conn:
        before = conn.execute("SELECT id, session_id, content FROM messages ORDER BY id").fetchall()
        schema = conn.execute("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid").fetchall()
        conn.execute("PRAGMA writable_schema=ON")
        for name in ("messages_fts", "idx_messages_session"):
            conn.execute(
                "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
                "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master WHERE name = ?", (name,)
            )
        conn.commit()
    with raw(db_path) as conn, pytest.raises(driver_module().DatabaseError, match="malformed database schema"):
        conn.execute("SELECT COUNT(*) FROM messages").fetchone()
    report = await repair_state_db_schema(db_path)
    assert report["ok"] and report["repaired"] and report["strategy"] == "dedup_schema"
    assert report["steps"] == ["dedup_schema"] and Path(report["backup_path"]).exists()
    with raw(db_path) as conn:
        assert conn.execute("SELECT id, session_id, content FROM messages ORDER BY id").fetchall() == before
        assert conn.execute("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid").fetchall() == schema
    db = SessionDB(db_path)
    try:
        hits = await db.search_messages(marker(3))
        assert [(hit["session_id"], hit["id"]) for hit in hits] == [("s", before[3][0])]
    finally:
        await db.close()
