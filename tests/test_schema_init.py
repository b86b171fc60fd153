"""Opening an SQLite file under contention and with old schemas (upstream 2026-08, spec §3.13).

- Column reconciliation ignores a column another process just added, raises
  on a locked file (the open then retries as a whole) and logs anything else
  as a warning instead of hiding it.
- An open that meets another process's write lock retries for its patience,
  then fails with the documented error; the next call opens.
- The v24 -> v25 system-prompt dedupe commits with the version bump or not
  at all, so an interrupted migration is redone by the next open (upstream's
  stops midway, bumps the version anyway and never resumes).

Locks are held by real OS processes using the store's own SQLite library.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, StoreClosedError, classify_persistence_error
from hermes_state.sqlite import backend as sqlite_backend
from hermes_state.sqlite.driver import driver_module
from hermes_state.sqlite.schema import _reconcile_columns

REPO_ROOT = Path(__file__).resolve().parent.parent

LOCK_HOLDER = """
import sys, time
from hermes_state.sqlite.driver import driver_module
conn = driver_module().connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""

OPENER = """
import asyncio, sys, time
from hermes_state import SessionDB, StoreClosedError, classify_persistence_error
async def main():
    while time.time() < float(sys.argv[2]):
        await asyncio.sleep(0.001)
    db = SessionDB(sys.argv[1])
    try:
        print((await db.get_session("s1"))["system_prompt"], flush=True)
    finally:
        await db.close()
asyncio.run(main())
"""


def raw(path: Path) -> Any:
    return closing(driver_module().connect(str(path), isolation_level=None, timeout=10))


def child_env(tmp_path: Path, name: str) -> dict[str, str]:
    home = tmp_path / f"home-{name}"
    home.mkdir(exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["HERMES_HOME"] = str(home)
    return env


async def hold_lock(tmp_path: Path, db_path: Path, seconds: float) -> asyncio.subprocess.Process:
    """A process holding the file's write lock for ``seconds``; returns once it holds it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOCK_HOLDER, str(db_path), str(seconds),
        stdout=asyncio.subprocess.PIPE, env=child_env(tmp_path, "lock"),
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"locked\n"
    return proc


async def make_old_file(path: Path, sessions: int = 5) -> None:
    """A file as an older writer leaves it: schema 24, prompts inline, no ``sessions.hidden``."""
    db = SessionDB(path)
    try:
        for i in range(1, sessions + 1):
            await db.create_session(f"s{i}", "cli", system_prompt=f"prompt {min(i, 3)}")
    finally:
        await db.close()
    with raw(path) as conn:
        conn.execute(
            "UPDATE sessions SET system_prompt = "
            "(SELECT prompt FROM system_prompts AS p WHERE p.hash = sessions.system_prompt_hash), "
            "system_prompt_hash = NULL"
        )
        conn.execute("DELETE FROM system_prompts")
        conn.execute("ALTER TABLE sessions DROP COLUMN hidden")
        conn.execute("UPDATE schema_version SET version = 24")


def file_state(path: Path) -> tuple[int, int, int, bool]:
    """(schema version, sessions with an inline prompt, stored prompts, has ``sessions.hidden``)."""
    with raw(path) as conn:
        version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
        inline = conn.execute("SELECT COUNT(*) FROM sessions WHERE system_prompt IS NOT NULL").fetchone()[0]
        prompts = conn.execute("SELECT COUNT(*) FROM system_prompts").fetchone()[0]
        hidden = any(r[1] == "hidden" for r in conn.execute("PRAGMA table_info(sessions)"))
    return version, inline, prompts, hidden


async def test_open_waits_out_a_foreign_write_lock_then_migrates(db_path: Path, tmp_path: Path) -> None:
    await make_old_file(db_path)
    holder = await hold_lock(tmp_path, db_path, 1.5)  # longer than one busy timeout of the writer
    started = time.monotonic()
    db = SessionDB(db_path)
    try:
        session = await db.get_session("s4")
        waited = time.monotonic() - started
        assert session is not None and session["system_prompt"] == "prompt 3" and session["hidden"] == 0
    finally:
        await db.close()
    assert await holder.wait() == 0
    assert waited > 1.0  # it did meet the lock
    assert file_state(db_path) == (25, 0, 3, True)


async def test_open_gives_up_after_its_patience_and_the_next_call_opens(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_old_file(db_path)
    monkeypatch.setattr(sqlite_backend, "OPEN_PATIENCE", 0.2)
    holder = await hold_lock(tmp_path, db_path, 2.5)
    db = SessionDB(db_path)
    try:
        with pytest.raises(Exception, match=r"^database is locked \(another Hermes process held the state.db "
                                            r"write lock for over 0.2s") as caught:
            await db.get_session("s1")
        assert classify_persistence_error(caught.value) == "locked"
        assert file_state(db_path)[0] == 24  # nothing half-done
        assert await holder.wait() == 0
        assert (await db.get_session("s1") or {})["system_prompt"] == "prompt 1"
    finally:
        await db.close()
    assert file_state(db_path) == (25, 0, 3, True)


async def test_close_stops_an_open_that_waits_for_a_lock(db_path: Path, tmp_path: Path) -> None:
    await make_old_file(db_path)
    holder = await hold_lock(tmp_path, db_path, 3)
    db = SessionDB(db_path)
    opening = asyncio.ensure_future(db.get_session("s1"))
    await asyncio.sleep(1.3)  # the first attempt has failed; the open is retrying
    started = time.monotonic()
    await db.close()
    # The attempt in flight ends with its lock error, or the pause ends with the closed store.
    with pytest.raises((StoreClosedError, sqlite3.OperationalError)):
        await opening
    assert time.monotonic() - started < 1.5
    holder.kill()
    await holder.wait()
    assert file_state(db_path)[0] == 24


def test_reconcile_raises_on_a_locked_file_and_adds_the_column_once_free(db_path: Path) -> None:
    asyncio.run(make_old_file(db_path))
    with raw(db_path) as holder, closing(driver_module().connect(str(db_path), isolation_level=None, timeout=0)) as conn:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(driver_module().OperationalError, match="locked"):
            _reconcile_columns(conn)
        holder.execute("ROLLBACK")
        _reconcile_columns(conn)
    assert file_state(db_path)[3] is True


def test_reconcile_warns_about_a_column_it_cannot_add_and_adds_the_rest(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    asyncio.run(make_old_file(db_path))
    with raw(db_path) as conn:
        # A view where a table should be: ALTER TABLE cannot add to it.
        conn.execute("DROP TABLE gateway_routing")
        conn.execute("CREATE VIEW gateway_routing AS SELECT '' AS scope, 'k' AS session_key")
        with caplog.at_level(logging.WARNING, logger="hermes_state.sqlite.schema"):
            _reconcile_columns(conn)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("gateway_routing.entry_json" in w and "remains behind SCHEMA_SQL" in w for w in warnings), warnings
    assert file_state(db_path)[3] is True  # sessions.hidden was still added


async def test_workers_opening_an_old_file_at_once_all_succeed(db_path: Path, tmp_path: Path) -> None:
    """Columns added by one worker while another reconciles are "duplicate column" there, not an error."""
    await make_old_file(db_path)
    start = str(time.time() + 1.5)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", OPENER, str(db_path), start,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env(tmp_path, str(n)),
        )
        for n in range(4)
    ]
    results = [await p.communicate() for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err.decode()[-2000:]
        assert out == b"prompt 1\n"
        assert b"remains behind" not in err, err.decode()
    assert file_state(db_path) == (25, 0, 3, True)


async def test_prompt_dedupe_is_all_or_nothing_and_the_next_open_completes(db_path: Path) -> None:
    await make_old_file(db_path)
    with raw(db_path) as conn:
        # The engine fails the migration at its fourth session, as a lost disk or a bug would.
        conn.execute(
            "CREATE TRIGGER fail_dedupe BEFORE UPDATE OF system_prompt_hash ON sessions WHEN NEW.id = 's4' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    db = SessionDB(db_path)
    try:
        with pytest.raises(Exception, match="injected failure"):
            await db.get_session("s1")
    finally:
        await db.close()
    assert file_state(db_path) == (24, 5, 0, True)  # every prompt still inline, the version not bumped
    with raw(db_path) as conn:
        conn.execute("DROP TRIGGER fail_dedupe")
    db = SessionDB(db_path)
    try:
        assert [(await db.get_session(f"s{i}") or {})["system_prompt"] for i in range(1, 6)] == [
            "prompt 1", "prompt 2", "prompt 3", "prompt 3", "prompt 3"]
    finally:
        await db.close()
    assert file_state(db_path) == (25, 0, 3, True)
