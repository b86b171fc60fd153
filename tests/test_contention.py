"""Another connection holding the file's write lock: bounded, jittered retries, then a clear error."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.commands import SetMeta
from hermes_state.sqlite.driver import driver_module

# PostgreSQL: this module's methods are not on that backend yet (issue 11 phase 2); drop the mark when they are.
pytestmark = pytest.mark.backends("sqlite")


def _hold_write_lock(path: Path, seconds: float, started: threading.Event) -> None:
    conn = driver_module().connect(str(path), isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('holder', 'other process')")
        started.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_write_waits_for_a_foreign_lock_then_commits(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(store.db_path, 2.5, started))
    holder.start()
    try:
        assert await asyncio.to_thread(started.wait, 5)
        t0 = time.monotonic()
        row_id = await store.append_message("s", "user", "after the lock")
        waited = time.monotonic() - t0
    finally:
        await asyncio.to_thread(holder.join)
    assert waited >= 1.5  # it really had to wait for the other connection
    assert [m["id"] for m in await store.get_messages("s")] == [row_id]
    assert await store.get_meta("holder") == "other process"
    # Reads were never blocked by the foreign writer.


async def test_reads_are_not_blocked_by_a_foreign_writer(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "visible")
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(store.db_path, 2.0, started))
    holder.start()
    try:
        assert await asyncio.to_thread(started.wait, 5)
        t0 = time.monotonic()
        rows = await store.get_messages("s")
        assert time.monotonic() - t0 < 1.0
        assert [m["content"] for m in rows] == ["visible"]
    finally:
        await asyncio.to_thread(holder.join)


async def test_exhausted_patience_raises_the_documented_error(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    started = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(store.db_path, 3.0, started))
    holder.start()
    try:
        assert await asyncio.to_thread(started.wait, 5)
        with pytest.raises(sqlite3.OperationalError) as info:
            await store._write(SetMeta(key="k", value="v"), patience=0.5)
    finally:
        await asyncio.to_thread(holder.join)
    message = str(info.value)
    assert message.startswith("database is locked (another Hermes process held the state.db write lock for over 0.5s")
    assert message.endswith("the database itself is healthy)")
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert await store.get_meta("k") is None
    await store.set_meta("k", "v")  # the writer is healthy afterwards
    assert await store.get_meta("k") == "v"


def _slow_read(conn: object, seconds: float) -> int:
    time.sleep(seconds)  # stands in for a long search on one reader thread
    return 1


async def test_a_slow_read_does_not_queue_other_reads(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    slow = asyncio.ensure_future(store._backend.reader.run(_slow_read, 1.5))  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    assert await store.get_session("s") is not None
    assert time.monotonic() - t0 < 0.75  # served by the other reader connection
    assert await slow == 1


async def test_read_connections_are_configurable(db_path: Path, hermes_home: Path) -> None:
    from hermes_state import ConfigError

    (hermes_home / "config.yaml").write_text("database:\n  read_connections: 1\n")
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        slow = asyncio.ensure_future(db._backend.reader.run(_slow_read, 1.0))  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await db.get_session("s")
        assert time.monotonic() - t0 >= 0.5  # one reader: the fast read waited its turn
        await slow
    finally:
        await db.close()
    (hermes_home / "config.yaml").write_text("database:\n  read_connections: 0\n")
    with pytest.raises(ConfigError, match="read_connections"):
        await SessionDB(db_path).get_session("s")
