"""``classify_persistence_error``: upstream's seven causes, in upstream's order of checks (spec §3.11).

The errors are the real ones wherever a store or SQLite produces them: an
append to a session closed by compression, a locked file, a read-only file,
a file that is not a database, a damaged page.
"""

from __future__ import annotations

import errno
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import hermes_state
from hermes_state import (
    PERSISTENCE_ERROR_CAUSES,
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    DatabaseMalformedError,
    SessionCompressionInProgressError,
    SessionDB,
    SessionTurnLeaseLostError,
    classify_persistence_error,
    is_disk_full_error,
)
from hermes_state.errors import LockTimeoutError
from hermes_state.sqlite.driver import driver_module


def test_the_causes_and_their_order() -> None:
    assert PERSISTENCE_ERROR_CAUSES == (
        "locked", "compression", "compression_closed", "turn_lease", "corrupt", "disk", "unknown",
    )
    assert hermes_state.PERSISTENCE_ERROR_CAUSES is PERSISTENCE_ERROR_CAUSES


def test_none_and_plain_errors_are_unknown() -> None:
    assert classify_persistence_error(None) == "unknown"
    assert classify_persistence_error(RuntimeError("something else")) == "unknown"
    assert classify_persistence_error(sqlite3.IntegrityError("UNIQUE constraint failed: sessions.title")) == "unknown"


def test_store_classes_come_first() -> None:
    assert classify_persistence_error(SessionTurnLeaseLostError("s")) == "turn_lease"
    assert classify_persistence_error(CompressionSessionClosedError("s")) == "compression_closed"
    # The busy error and its subclass used to be "locked".
    assert classify_persistence_error(CompressionSessionBusyError("lease lost")) == "compression"
    assert classify_persistence_error(SessionCompressionInProgressError("s")) == "compression"
    # A class beats words in its message that point elsewhere.
    assert classify_persistence_error(CompressionSessionBusyError("database is locked")) == "compression"
    assert classify_persistence_error(DatabaseMalformedError("/x/state.db", "disk I/O error")) == "corrupt"
    assert classify_persistence_error(LockTimeoutError("lock_timeout reached")) == "locked"


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("Session turn lease lost somewhere", "turn_lease"),
        ("session 'x' is closed by compression", "compression_closed"),
        ("Session 'x' is being compressed by another writer", "compression"),
        ("Compression lease for 'x' lost before commit", "compression"),
        ("database disk image is malformed", "corrupt"),  # corruption is checked before "disk"
        ("malformed database schema (sessions)", "corrupt"),
        ("file is not a database", "corrupt"),
        ("database corruption at line 1", "corrupt"),
        ("database is locked", "locked"),
        ("database table is locked: sessions", "locked"),
        ("SQLITE_BUSY: busy snapshot", "locked"),
        ("database or disk is full", "disk"),
        ("disk I/O error", "disk"),
        ("attempt to write a readonly database", "disk"),
        ("read-only file system", "disk"),
    ],
)
def test_message_checks(message: str, cause: str) -> None:
    assert classify_persistence_error(sqlite3.OperationalError(message)) == cause
    # Upstream's classifiers also take the message on its own, as a string.
    assert classify_persistence_error(message) == cause


def test_message_strings_for_the_disk_check() -> None:
    assert is_disk_full_error("database or disk is full")
    assert is_disk_full_error("No space left on device")
    assert not is_disk_full_error("database is locked")
    assert not is_disk_full_error("")


def test_full_disk_through_the_cause_chain() -> None:
    assert classify_persistence_error(OSError(errno.ENOSPC, "No space left on device")) == "disk"
    outer = RuntimeError("write failed")
    outer.__cause__ = OSError(errno.ENOSPC, "quota")
    assert classify_persistence_error(outer) == "disk"


async def test_real_store_errors(store: SessionDB) -> None:
    await store.create_session("p", "cli")
    await store.end_session("p", "compression")
    with pytest.raises(CompressionSessionClosedError) as closed:
        await store.append_message("p", "user", "too late")
    assert classify_persistence_error(closed.value) == "compression_closed"
    await store.create_session("q", "cli")
    with pytest.raises(CompressionSessionBusyError) as busy:
        await store.publish_compression_child(
            parent_session_id="q", child_session_id="q2", source="cli",
            messages=[{"role": "user", "content": "summary"}], compression_lock_holder="nobody",
        )
    assert classify_persistence_error(busy.value) == "compression"


def test_real_sqlite_errors(tmp_path: Path) -> None:
    driver = driver_module()  # its own error classes (pysqlite3's are not sqlite3's)
    connect = driver.connect
    db = tmp_path / "locked.db"
    with closing(connect(str(db), isolation_level=None)) as holder, closing(
        connect(str(db), isolation_level=None, timeout=0)
    ) as other:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(driver.OperationalError) as locked:
            other.execute("INSERT INTO t VALUES (1)")
        holder.execute("ROLLBACK")
    assert classify_persistence_error(locked.value) == "locked"

    text = tmp_path / "notes.db"
    text.write_bytes(b"these are notes, not a database file at all" * 100)
    with closing(connect(str(text))) as conn, pytest.raises(driver.DatabaseError) as foreign:
        conn.execute("SELECT * FROM sqlite_master").fetchall()
    assert classify_persistence_error(foreign.value) == "corrupt"

    with closing(connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)) as conn, pytest.raises(
        driver.OperationalError
    ) as readonly:
        conn.execute("INSERT INTO t VALUES (1)")
    assert classify_persistence_error(readonly.value) == "disk"
