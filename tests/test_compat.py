"""Module-level helpers other components import from hermes_state (spec §0.2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import hermes_state
from hermes_state.sqlite.driver import driver_module, is_sqlite_wal_reset_vulnerable


def test_journal_policy_for_foreign_connections(tmp_path: Path, hermes_home: Path) -> None:
    assert hermes_state.resolve_journal_mode() == "wal"
    conn = driver_module().connect(str(tmp_path / "other.db"), isolation_level=None)
    try:
        mode = hermes_state.apply_wal_with_fallback(conn, db_label="other.db")
        assert mode == ("delete" if is_sqlite_wal_reset_vulnerable() else "wal")
        hermes_state.apply_database_pragmas(conn, busy_timeout_ms=1234)
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1234
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    finally:
        conn.close()
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: DELETE\n  cache_size: -4000\n")
    assert hermes_state.resolve_journal_mode() == "delete"
    conn = driver_module().connect(str(tmp_path / "third.db"), isolation_level=None)
    try:
        assert hermes_state.apply_wal_with_fallback(conn) == "delete"
        hermes_state.apply_database_pragmas(conn)
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -4000
    finally:
        conn.close()


async def test_bad_config_names_the_key(hermes_home: Path, db_path: Path) -> None:
    from hermes_state.config import load_config

    (hermes_home / "config.yaml").write_text("database:\n  cache_size: lots\n")
    assert hermes_state.resolve_journal_mode() == "wal"  # the helpers fall back to defaults
    with pytest.raises(hermes_state.ConfigError, match=r"database\.cache_size"):
        load_config()
    db = hermes_state.SessionDB(db_path)  # the store refuses to open on it, naming the key
    with pytest.raises(hermes_state.ConfigError, match=r"database\.cache_size"):
        await db.get_session("x")
    await db.close()
    assert not db_path.exists()


def test_limits_from_config(hermes_home: Path) -> None:
    assert hermes_state.resolved_max_resume_messages() == 20000
    assert hermes_state.resolved_max_export_messages() == 20000
    (hermes_home / "config.yaml").write_text("sessions:\n  max_resume_messages: 0\n  max_export_messages: 5\n")
    assert hermes_state.resolved_max_resume_messages() == 0
    assert hermes_state.resolved_max_export_messages() == 5


def test_preflight_and_unavailable_message(tmp_path: Path) -> None:
    target = tmp_path / "new" / "dir" / "state.db"
    hermes_state.preflight_db_writability(target)
    assert target.parent.is_dir()
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "state.db").write_bytes(b"")
    (locked / "state.db").chmod(0o400)
    try:
        import os

        if os.geteuid() != 0:  # root can write anything; the check is meaningless there
            with pytest.raises(sqlite3.OperationalError, match="not writable"):
                hermes_state.preflight_db_writability(locked / "state.db")
    finally:
        (locked / "state.db").chmod(0o600)
    assert hermes_state.format_session_db_unavailable("Store down").startswith("Store down")


def test_workspace_key() -> None:
    assert hermes_state.workspace_key({"git_repo_root": "/repo", "cwd": "/repo/sub"}) == "/repo"
    assert hermes_state.workspace_key({"git_repo_root": "", "cwd": "/tmp/x"}) == "/tmp/x"
    assert hermes_state.workspace_key({}) is None
