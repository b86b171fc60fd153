"""Module-level helpers other components import from hermes_state (spec §0.2)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import hermes_state
from hermes_state.sqlite.driver import driver_module, is_sqlite_wal_reset_vulnerable, open_connection


async def pragma(conn, name: str):  # type: ignore[no-untyped-def]
    return (await (await conn.execute(f"PRAGMA {name}")).fetchone())[0]


async def test_journal_policy_for_foreign_connections(tmp_path: Path, hermes_home: Path) -> None:
    # As hosts call them: coroutines, on an aiosqlite connection of their own.
    assert await hermes_state.resolve_journal_mode() == "wal"
    conn = await open_connection(str(tmp_path / "other.db"))
    try:
        mode = await hermes_state.apply_wal_with_fallback(conn, db_label="other.db")
        assert mode == ("delete" if is_sqlite_wal_reset_vulnerable() else "wal")
        assert await pragma(conn, "journal_mode") == mode
        cache = await pragma(conn, "cache_size")
        await hermes_state.apply_database_pragmas(conn, db_label="other.db")  # config.yaml sets none
        assert await pragma(conn, "cache_size") == cache
    finally:
        await conn.close()
    await asyncio.to_thread((hermes_home / "config.yaml").write_text, "database:\n  journal_mode: DELETE\n  cache_size: -4000\n")
    assert await hermes_state.resolve_journal_mode() == "delete"
    conn = await open_connection(str(tmp_path / "third.db"))
    try:
        assert await hermes_state.apply_wal_with_fallback(conn) == "delete"
        await hermes_state.apply_database_pragmas(conn)
        assert await pragma(conn, "cache_size") == -4000
    finally:
        await conn.close()


def test_a_plain_db_api_connection_is_refused(tmp_path: Path) -> None:
    # Its statements could only run on the thread that made it: the event loop's.
    conn = driver_module().connect(str(tmp_path / "plain.db"), isolation_level=None)
    try:
        for call in (
            hermes_state.apply_wal_with_fallback(conn),
            hermes_state.apply_database_pragmas(conn),
            hermes_state.load_fts5_cjk_extension(conn),
        ):
            with pytest.raises(TypeError, match="conn must be an aiosqlite.Connection"):
                asyncio.run(call)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # untouched
    finally:
        conn.close()


async def test_bad_config_names_the_key(hermes_home: Path, db_path: Path) -> None:
    from hermes_state.config import load_config

    await asyncio.to_thread((hermes_home / "config.yaml").write_text, "database:\n  cache_size: lots\n")
    assert await hermes_state.resolve_journal_mode() == "wal"  # the helpers fall back to defaults
    with pytest.raises(hermes_state.ConfigError, match=r"database\.cache_size"):
        await asyncio.to_thread(load_config)
    db = hermes_state.SessionDB(db_path)  # the store refuses to open on it, naming the key
    with pytest.raises(hermes_state.ConfigError, match=r"database\.cache_size"):
        await db.get_session("x")
    await db.close()
    assert not db_path.exists()


async def test_limits_from_config(hermes_home: Path) -> None:
    assert await hermes_state.resolved_max_resume_messages() == 20000
    assert await hermes_state.resolved_max_export_messages() == 20000
    text = "sessions:\n  max_resume_messages: 0\n  max_export_messages: 5\n"
    await asyncio.to_thread((hermes_home / "config.yaml").write_text, text)
    assert await hermes_state.resolved_max_resume_messages() == 0
    assert await hermes_state.resolved_max_export_messages() == 5


async def test_sqlite_source_id_is_the_drivers() -> None:
    def direct() -> str:
        conn = driver_module().connect(":memory:")
        try:
            return str(conn.execute("SELECT sqlite_source_id()").fetchone()[0])
        finally:
            conn.close()

    source = await hermes_state.sqlite_source_id()
    assert source and source == await asyncio.to_thread(direct)


async def test_zeroed_file_helpers(tmp_path: Path) -> None:
    zeroed, fine, empty = tmp_path / "zeroed.db", tmp_path / "fine.db", tmp_path / "empty.db"
    await asyncio.to_thread(zeroed.write_bytes, b"\x00" * 4096)
    await asyncio.to_thread(fine.write_bytes, b"SQLite format 3\x00" + b"\x00" * 4080)
    await asyncio.to_thread(empty.write_bytes, b"")
    assert await hermes_state.is_zeroed_state_db(zeroed)
    assert await hermes_state.is_zeroed_state_db(zeroed, probe_bytes=4096, force=True)
    assert not await hermes_state.is_zeroed_state_db(fine)
    assert not await hermes_state.is_zeroed_state_db(empty)
    assert not await hermes_state.is_zeroed_state_db(tmp_path / "missing.db")
    assert await hermes_state.quarantine_zeroed_state_db(fine) is None
    moved = await hermes_state.quarantine_zeroed_state_db(zeroed)
    assert moved is not None and moved.name.startswith("zeroed.db.zeroed-")
    assert not await asyncio.to_thread(zeroed.exists)


async def test_cjk_helpers_on_an_aiosqlite_connection(tmp_path: Path, hermes_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_FTS5_CJK_SO", raising=False)
    assert await hermes_state.fts5_cjk_so_path() == hermes_home / "lib" / "libfts5_cjk.so"
    conn = await open_connection(str(tmp_path / "cjk.db"))
    try:
        assert await hermes_state.load_fts5_cjk_extension(conn) is False  # no library there
    finally:
        await conn.close()


async def test_preflight_and_unavailable_message(tmp_path: Path) -> None:
    target = tmp_path / "new" / "dir" / "state.db"
    await hermes_state.preflight_db_writability(target)
    assert target.parent.is_dir()
    await hermes_state.preflight_db_writability(":memory:")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "state.db").write_bytes(b"")
    (locked / "state.db").chmod(0o400)
    try:
        import os

        if os.geteuid() != 0:  # root can write anything; the check is meaningless there
            with pytest.raises(sqlite3.OperationalError, match="locked.db is not writable"):
                await hermes_state.preflight_db_writability(locked / "state.db", db_label="locked.db")
    finally:
        (locked / "state.db").chmod(0o600)
    assert hermes_state.format_session_db_unavailable("Store down").startswith("Store down")


def test_workspace_key() -> None:
    assert hermes_state.workspace_key({"git_repo_root": "/repo", "cwd": "/repo/sub"}) == "/repo"
    assert hermes_state.workspace_key({"git_repo_root": "", "cwd": "/tmp/x"}) == "/tmp/x"
    assert hermes_state.workspace_key({}) is None
