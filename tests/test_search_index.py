"""FTS index upkeep: deferred backfills, the legacy layout and its migration, corruption handling."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.sqlite.driver import driver_module, run_on, sqlite_version_info
from hermes_state.sqlite.search.fts_schema import legacy_tables_sql, legacy_triggers_sql

# SQLite only: every test here inspects or damages the FTS5 tables in the file; PostgreSQL's
# counterparts of these upkeep calls are covered in test_postgres_search.py.
pytestmark = pytest.mark.backends("sqlite")


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection for arranging on-disk states the store itself never produces.

    It uses the store's own SQLite build: an older library writing the same
    WAL file concurrently would be exposed to the WAL-reset bug.
    """
    return closing(driver_module().connect(str(path), isolation_level=None))  # type: ignore[return-value]


def meta(path: Path, key: str) -> str | None:
    with raw(path) as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def integrity_ok(path: Path) -> None:
    with raw(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name IN ('messages_fts', 'messages_fts_trigram')")]
        for table in tables:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


async def filled_file(path: Path, n: int) -> list[int]:
    """Create a store file holding ``n`` messages (every tenth says "zebra"), closed again."""
    db = SessionDB(path)
    try:
        return await fill(db, n)
    finally:
        await db.close()


async def fill(db: SessionDB, n: int, word: str = "zebra") -> list[int]:
    await db.create_session("s", "cli")
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"row {i} {word if i % 10 == 0 else 'plain'} text"} for i in range(n)]
    await db.append_messages_batch("s", rows)
    return [m["id"] for m in await db.get_messages("s")]


def corrupt_page(path: Path, table: str) -> None:
    """Overwrite the root b-tree page of ``table`` (real on-disk corruption)."""
    with raw(path) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def corrupt_structure(conn: sqlite3.Connection) -> None:
    """Damage the FTS5 structure record of ``messages_fts`` (repairable by 'rebuild')."""
    conn.execute("UPDATE messages_fts_data SET block = x'0102030405' WHERE id = 10")


# ------------------------------------------------------------------ fresh files


async def test_storage_version_is_written_on_second_open(db_path: Path) -> None:
    db = SessionDB(db_path)
    await fill(db, 5)
    await db.close()
    assert meta(db_path, "fts_storage_version") is None
    db = SessionDB(db_path)
    try:
        assert await db.fts_optimize_available() is False
        assert await db.fts_rebuild_status() is None and await db.fts_cjk_rebuild_status() is None
        assert await db.fts_rebuild_step() is False
    finally:
        await db.close()
    assert meta(db_path, "fts_storage_version") == "1"


async def test_optimize_and_rebuild_keep_results(store: SessionDB) -> None:
    await fill(store, 40)
    before = [h["id"] for h in await store.search_messages("zebra", limit=50)]
    assert len(before) == 4
    assert await store.optimize_fts() == 2
    assert await store.rebuild_fts() == 2
    assert [h["id"] for h in await store.search_messages("zebra", limit=50)] == before
    assert await store.optimize_fts_storage(vacuum=False) == {"ok": True, "vacuumed": None}
    integrity_ok(store.db_path)


# ------------------------------------------------------------- deferred backfill


async def test_pending_backfill_is_searched_by_like_and_finished_in_steps(db_path: Path) -> None:
    ids = await filled_file(db_path, 1200)
    with raw(db_path) as conn:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
        conn.execute("INSERT INTO state_meta VALUES ('fts_rebuild_high_water', ?), ('fts_rebuild_progress', '0')", (str(ids[-1]),))

    db = SessionDB(db_path)
    try:
        assert await db.fts_rebuild_status() == {"pending": True, "total": ids[-1], "indexed": 0, "percent": 0}
        assert await db.fts_optimize_available() is True
        # Not yet indexed: the LIKE supplement finds them (no highlight), newest first.
        gap = await db.search_messages("zebra", limit=5)
        assert [h["id"] for h in gap] == [ids[i] for i in (1190, 1180, 1170, 1160, 1150)]
        assert all(">>>" not in h["snippet"] for h in gap)
        assert await db.search_messages("zebra plain") == []  # every term must occur
        # New rows are indexed by the triggers straight away.
        new_id = await db.append_message("s", "user", "fresh zebra sighting")
        first = await db.search_messages("zebra", limit=3)
        assert first[0]["id"] == new_id and ">>>zebra<<<" in first[0]["snippet"]
        assert [h["id"] for h in first[1:]] == [ids[1190], ids[1180]]
        steps = []
        while True:
            more = await db.fts_rebuild_step()
            steps.append(more)
            status = await db.fts_rebuild_status()
            if not more:
                break
            assert status is not None and 0 < status["percent"] < 100
        assert steps == [True, True, False]
        assert await db.fts_rebuild_status() is None
        hits = await db.search_messages("zebra", limit=500)
        assert len(hits) == 121 and all(">>>zebra<<<" in h["snippet"] for h in hits)
        assert await db.fts_optimize_available() is False
    finally:
        await db.close()
    integrity_ok(db_path)


async def test_empty_index_over_messages_is_rebuilt_by_optimize_storage(db_path: Path) -> None:
    await filled_file(db_path, 30)
    with raw(db_path) as conn:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
    db = SessionDB(db_path)
    try:
        assert await db.fts_optimize_available() is True
        phases: list[dict[str, Any]] = []
        assert await db.optimize_fts_storage(progress_cb=phases.append) == {"ok": True, "vacuumed": True}
        assert phases[0]["phase"] == "backfill" and phases[-1] == {"phase": "done", "percent": 100, "indexed": 0, "total": 0}
        assert {p["phase"] for p in phases} >= {"backfill", "teardown", "vacuum", "done"}
        assert len(await db.search_messages("zebra")) == 3
    finally:
        await db.close()
    assert meta(db_path, "fts_storage_version") == "1"


# ----------------------------------------------------------------- legacy layout


def make_legacy(path: Path, *, broad_update: bool = False) -> None:
    """Turn a closed store file into the schema-v22 inline FTS layout."""
    triggers = legacy_triggers_sql()
    if broad_update:
        triggers = triggers.replace("AFTER UPDATE OF content, tool_name, tool_calls ON messages", "AFTER UPDATE ON messages")
    text = "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
    with raw(path) as conn:
        for name in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER messages_fts_{name}")
            conn.execute(f"DROP TRIGGER messages_fts_trigram_{name}")
        conn.execute("DROP TABLE messages_fts")
        conn.execute("DROP TABLE messages_fts_trigram")
        conn.execute("DROP VIEW messages_fts_trigram_src")
        conn.executescript(legacy_tables_sql() + triggers)
        conn.execute(f"INSERT INTO messages_fts(rowid, content) SELECT id, {text} FROM messages")
        conn.execute(f"INSERT INTO messages_fts_trigram(rowid, content) SELECT id, {text} FROM messages")
        conn.execute("UPDATE schema_version SET version = 22")
        conn.execute("DELETE FROM state_meta")


async def test_legacy_layout_keeps_working_and_migrates(db_path: Path) -> None:
    db = SessionDB(db_path)
    await fill(db, 1100)
    await db.append_message("s", "tool", "dockerfile missing", tool_name="terminal")
    await db.close()
    make_legacy(db_path, broad_update=True)

    db = SessionDB(db_path)
    try:
        info = await db.storage_info()
        assert info["fts"] == "legacy" and info["schema_version"] == 25
        assert await db.get_meta("fts_optimize_available") == "1"
        assert await db.fts_optimize_available() is True
        with raw(db_path) as conn:
            update_sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts_update'").fetchone()[0]
        assert "AFTER UPDATE OF content, tool_name, tool_calls" in update_sql  # narrowed at open
        legacy_hits = {h["id"] for h in await db.search_messages("zebra", limit=500)}
        assert len(legacy_hits) == 110
        assert ">>>zebra<<<" in (await db.search_messages("zebra"))[0]["snippet"]
        # The legacy trigram index holds tool rows too.
        assert [h["role"] for h in await db.search_messages("ckerfi")] == ["tool"]
        late = await db.append_message("s", "user", "zebra appended on the legacy layout")
        assert late in {h["id"] for h in await db.search_messages("zebra", limit=500)}
        await db.create_session("t", "cli")
        await db.replace_messages("t", [{"role": "user", "content": "zebra in a replaced transcript"}])

        seen: list[dict[str, Any]] = []

        def stop_midway(progress: dict[str, Any]) -> None:
            seen.append(progress)
            if progress["phase"] == "backfill" and progress["indexed"] >= 500:
                raise KeyboardInterrupt("interrupted migration")

        with pytest.raises(KeyboardInterrupt):
            await db.optimize_fts_storage(progress_cb=stop_midway)
        assert (await db.storage_info())["fts"] == "legacy"  # facts are from open time
        status = await db.fts_rebuild_status()
        assert status is not None and status["indexed"] == 500
        # Half migrated: searches still see every row (index + LIKE supplement).
        assert len(await db.search_messages("zebra", limit=500)) == 112
    finally:
        await db.close()

    db = SessionDB(db_path)
    try:
        assert (await db.storage_info())["fts"] == "current"
        assert await db.fts_optimize_available() is True
        result = await db.optimize_fts_storage()
        assert result == {"ok": True, "vacuumed": True}
        assert await db.fts_optimize_available() is False
        hits = await db.search_messages("zebra", limit=500)
        assert len(hits) == 112 and all(">>>zebra<<<" in h["snippet"] for h in hits)
        assert await db.search_messages("ckerfi") == []  # current trigram index skips tool rows
        assert [h["role"] for h in await db.search_messages("dockerfile")] == ["tool"]
    finally:
        await db.close()
    with raw(db_path) as conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'fts_v22_trash_%'").fetchall()
        assert "tool_name" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()[0]
    assert meta(db_path, "fts_storage_version") == "1" and meta(db_path, "fts_optimize_available") is None
    integrity_ok(db_path)


async def test_missing_triggers_are_recreated_and_the_index_rebuilt(db_path: Path) -> None:
    await filled_file(db_path, 20)
    with raw(db_path) as conn:
        conn.execute("DROP TRIGGER messages_fts_insert")
        conn.execute(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES ('s', 'user', 'written by an old tool', 1.0)"
        )
    db = SessionDB(db_path)
    try:
        assert [h["snippet"] for h in await db.search_messages("tool")] == ["written by an old >>>tool<<<"]
    finally:
        await db.close()
    integrity_ok(db_path)


# -------------------------------------------------------------------- corruption


async def test_write_on_corrupt_structure_rebuilds_in_place(store: SessionDB) -> None:
    await fill(store, 30)
    with raw(store.db_path) as conn:
        corrupt_structure(conn)
    new_id = await store.append_message("s", "user", "zebra after the damage")
    assert await store.get_meta("fts_stale") is None
    hits = await store.search_messages("zebra", limit=50)
    assert new_id in {h["id"] for h in hits} and len(hits) == 4
    assert all(">>>zebra<<<" in h["snippet"] for h in hits)
    integrity_ok(store.db_path)


async def test_search_on_corrupt_structure_rebuilds_in_place(store: SessionDB) -> None:
    await fill(store, 30)
    with raw(store.db_path) as conn:
        corrupt_structure(conn)
    hits = await store.search_messages("zebra", limit=50)
    assert len(hits) == 3 and all(">>>zebra<<<" in h["snippet"] for h in hits)
    assert await store.get_meta("fts_stale") is None
    integrity_ok(store.db_path)


async def test_read_only_store_cannot_repair_and_says_so(db_path: Path) -> None:
    db = SessionDB(db_path)
    await fill(db, 30)
    await db.append_message("s", "user", "世界 notes")
    await db.close()
    with raw(db_path) as conn:
        corrupt_structure(conn)
    ro = SessionDB(db_path, read_only=True)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="corrupt"):
            await ro.search_messages("zebra")
        assert len(await ro.search_messages("世界")) == 1  # the LIKE route needs no index
    finally:
        await ro.close()


async def test_unrepairable_index_fails_open_and_heals_on_next_open(db_path: Path) -> None:
    await filled_file(db_path, 60)
    corrupt_page(db_path, "messages_fts_data")

    db = SessionDB(db_path)
    try:
        # The index cannot be rebuilt; the write still lands and FTS detaches.
        new_id = await db.append_message("s", "user", "zebra written after the crash")
        assert await db.get_meta("fts_stale") == "1"
        rows = await db.get_messages("s")
        assert rows[-1]["id"] == new_id
        with raw(db_path) as conn:
            assert not conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'messages_fts%'").fetchall()
        # Searches are served by the LIKE fallback meanwhile.
        hits = await db.search_messages("zebra", limit=50)
        assert len(hits) == 7 and hits[0]["id"] == new_id and ">>>" not in hits[0]["snippet"]
        more = await db.append_messages_batch("s", [{"role": "user", "content": "zebra batch row"}] * 3)
        assert more == 3
    finally:
        await db.close()

    db = SessionDB(db_path)
    try:
        assert (await db.storage_info())["fts"] == "current"
        assert await db.get_meta("fts_stale") is None
        hits = await db.search_messages("zebra", limit=50)
        assert len(hits) == 10 and all(">>>zebra<<<" in h["snippet"] for h in hits)
        await db.vacuum()  # reclaims the pages of the unlinked damaged index
    finally:
        await db.close()
    integrity_ok(db_path)


async def test_stale_marker_serves_boolean_like_search(store: SessionDB, db_path: Path) -> None:
    await store.create_session("s", "cli")
    await store.create_session("t", "telegram")
    a = await store.append_message("s", "user", "alpha beta", timestamp=100.0)
    b = await store.append_message("s", "assistant", "alpha gamma", timestamp=200.0)
    c = await store.append_message("t", "user", "delta 100% sure", timestamp=300.0)
    d = await store.append_message("s", "tool", "ALPHA tool output", tool_name="beta_tool", timestamp=400.0)
    # Another process failed open: every instance notices before its next search.
    with raw(db_path) as conn:
        conn.execute("INSERT INTO state_meta VALUES ('fts_stale', '1')")
    ids = lambda hits: [h["id"] for h in hits]
    assert ids(await store.search_messages("alpha")) == [d, b, a]
    assert ids(await store.search_messages("alpha", sort="oldest")) == [a, b, d]
    assert ids(await store.search_messages("alpha beta")) == [d, a]  # beta via tool_name
    assert ids(await store.search_messages("alpha NOT gamma")) == [d, a]
    assert ids(await store.search_messages("gamma OR delta")) == [c, b]
    assert ids(await store.search_messages('"alpha gamma" OR nothing')) == [b]
    assert ids(await store.search_messages("100%")) == [c]
    assert ids(await store.search_messages("10_%")) == []
    assert ids(await store.search_messages("beta NOT alpha")) == []
    assert ids(await store.search_messages("NOT gamma")) == [b]  # a leading NOT is dropped
    assert ids(await store.search_messages("alpha", source_filter=["telegram"])) == []
    assert ids(await store.search_messages("alpha", role_filter=["tool"])) == [d]
    assert ids(await store.search_messages("alpha", limit=1, offset=1)) == [b]
    hit = (await store.search_messages("gamma"))[0]
    assert hit["snippet"] == "alpha gamma" and [c["content"] for c in hit["context"]] == ["alpha beta", "alpha gamma", "ALPHA tool output"]
    many = " ".join(f"w{i}" for i in range(600)) + " alpha"
    assert await store.search_messages(many) == []


async def _after_rank_change(store: SessionDB) -> None:
    """Let every reader connection see a rank another connection configured.

    SQLite 3.40's FTS5 (the interpreter's SQLite in CI) still ranks each
    connection's first statement after such a change with the old setting,
    whatever the statement (``ORDER BY rank`` too); 3.53 ranks it with the
    new one at once.
    """
    if sqlite_version_info() >= (3, 53, 0):
        return
    for lane in store._backend._lanes:  # type: ignore[attr-defined]
        await run_on(lane.conn, lambda raw: raw.execute("SELECT rank FROM messages_fts WHERE messages_fts MATCH 'x'").fetchall())


async def test_search_follows_index_changes_made_by_another_connection(store: SessionDB, db_path: Path) -> None:
    # Each reader caches which index tables exist; a schema change must reach it.
    await store.create_session("s", "cli")
    words = await store.append_message("s", "user", "zebra zebra zebra zebra in the words")
    named = await store.append_message("s", "tool", "plain output", tool_name="zebra_tool zebra")
    await store.append_message("s", "user", "the dockerfile is missing")
    ids = lambda hits: [h["id"] for h in hits]
    for _ in range(3):  # every reader connection has searched (and cached) once
        assert ids(await store.search_messages("zebra")) == [words, named]
        assert len(await store.search_messages("ckerfi")) == 1  # substring: the trigram index
    # A configured rank is no schema change and no setting the store looks up: the ranked
    # statements order by the rank column, so the new weights apply on every route.
    with raw(db_path) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('rank', 'bm25(0.01, 100.0, 1.0)')")
    await _after_rank_change(store)
    for _ in range(3):
        assert ids(await store.search_messages("zebra")) == [named, words]
        assert ids(await store.search_messages("zebra", source_filter=["cli"])) == [named, words]
        assert ids(await store.search_messages("zebra", fields=["id"])) == [named, words]
    with raw(db_path) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('rank', 'bm25()')")
    await _after_rank_change(store)
    for _ in range(3):
        assert ids(await store.search_messages("zebra")) == [words, named]
    with raw(db_path) as conn:
        for name in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER messages_fts_trigram_{name}")
        conn.execute("DROP TABLE messages_fts_trigram")
    for _ in range(3):
        assert await store.search_messages("ckerfi") == []
        assert ids(await store.search_messages("dockerfile")) == [words + 2]
