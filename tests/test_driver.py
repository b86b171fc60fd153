"""Driver selection and the WAL-reset bug guard, in fresh interpreters (the driver is chosen once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state.sqlite.driver import is_sqlite_wal_reset_vulnerable

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import asyncio, json, sys
from hermes_state import SessionDB
from hermes_state.sqlite.driver import is_sqlite_wal_reset_vulnerable

async def main(path):
    db = SessionDB(path)
    try:
        await db.create_session("s", "cli")
        row_id = await db.append_message("s", "user", "hello")
        info = await db.storage_info()
        info["vulnerable"] = is_sqlite_wal_reset_vulnerable()
        info["row"] = [m["content"] for m in await db.get_messages("s")] == ["hello"] and row_id == 1
        print(json.dumps(info))
    finally:
        await db.close()

asyncio.run(main(sys.argv[1]))
"""


def run_store(path: Path, driver: str, home: Path) -> dict:
    env = dict(os.environ, HERMES_SQLITE_DRIVER=driver, HERMES_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_vulnerable_version_ranges() -> None:
    assert is_sqlite_wal_reset_vulnerable((3, 40, 1))
    assert is_sqlite_wal_reset_vulnerable((3, 7, 0))
    assert not is_sqlite_wal_reset_vulnerable((3, 6, 23))
    assert not is_sqlite_wal_reset_vulnerable((3, 44, 6))
    assert is_sqlite_wal_reset_vulnerable((3, 45, 0))
    assert not is_sqlite_wal_reset_vulnerable((3, 50, 7))
    assert is_sqlite_wal_reset_vulnerable((3, 51, 2))
    assert not is_sqlite_wal_reset_vulnerable((3, 51, 3))
    assert not is_sqlite_wal_reset_vulnerable((3, 53, 4))


def test_bundled_driver_runs_wal(tmp_path: Path, hermes_home: Path) -> None:
    pytest.importorskip("pysqlite3")
    info = run_store(tmp_path / "modern.db", "pysqlite3", hermes_home)
    assert info["driver"] == "pysqlite3" and info["row"]
    assert info["vulnerable"] is False
    assert info["journal_mode"] == "wal"


def test_stdlib_driver_follows_the_wal_reset_guard(tmp_path: Path, hermes_home: Path) -> None:
    info = run_store(tmp_path / "stdlib.db", "sqlite3", hermes_home)
    assert info["driver"] == "sqlite3" and info["row"]
    # A vulnerable SQLite gives a new file a rollback journal; a fixed one uses WAL.
    assert info["journal_mode"] == ("delete" if info["vulnerable"] else "wal")


def test_vulnerable_sqlite_keeps_an_existing_wal_file(tmp_path: Path, hermes_home: Path) -> None:
    pytest.importorskip("pysqlite3")
    path = tmp_path / "shared.db"
    assert run_store(path, "pysqlite3", hermes_home)["journal_mode"] == "wal"
    info = run_store(path, "sqlite3", hermes_home)
    assert info["journal_mode"] == "wal"  # already WAL: kept, whatever the version


def test_anchor_file_opens_on_both_drivers(anchor_db: Path, tmp_path: Path, hermes_home: Path) -> None:
    import shutil

    copy = tmp_path / "anchor2.db"
    shutil.copyfile(anchor_db, copy)
    for driver, path in (("sqlite3", anchor_db), ("pysqlite3", copy)):
        if driver == "pysqlite3":
            pytest.importorskip("pysqlite3")
        env = dict(os.environ, HERMES_SQLITE_DRIVER=driver, HERMES_HOME=str(hermes_home), PYTHONPATH=str(ROOT))
        script = (
            "import asyncio, sys\nfrom hermes_state import SessionDB\n"
            "async def m():\n    db = SessionDB(sys.argv[1])\n"
            "    try:\n        s = await db.get_session('20261101_101500_a1b2c3')\n"
            "        print(s['title'], await db.message_count())\n    finally:\n        await db.close()\n"
            "asyncio.run(m())\n"
        )
        done = subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[:3] == ["Docker", "deploy", "failure"]


def test_process_exits_even_if_the_store_was_never_closed(tmp_path: Path, hermes_home: Path) -> None:
    script = (
        "import asyncio, sys\nfrom hermes_state import SessionDB\n"
        "db = SessionDB(sys.argv[1])\n"
        "async def m():\n    await db.create_session('s', 'cli')\n"
        "    print(await db.append_message('s', 'user', 'kept'), flush=True)\n"
        "asyncio.run(m())\n"  # no close(): the interpreter must still exit
    )
    path = tmp_path / "unclosed.db"
    env = dict(os.environ, HERMES_HOME=str(hermes_home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    row_id = int(done.stdout.strip())
    import sqlite3

    with sqlite3.connect(path) as conn:  # the acknowledged write is durable
        assert conn.execute("SELECT id, content FROM messages").fetchall() == [(row_id, "kept")]


def test_missing_pysqlite3_falls_back_to_the_interpreters_sqlite(tmp_path: Path, hermes_home: Path) -> None:
    """Where no wheel exists pysqlite3 is not installed: the store picks sqlite3 on its own."""
    blocked = "import sys\nsys.modules['pysqlite3'] = None  # as if the package were not installed\n"
    env = {k: v for k, v in os.environ.items() if k != "HERMES_SQLITE_DRIVER"}
    env.update(HERMES_HOME=str(hermes_home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", blocked + SCRIPT, str(tmp_path / "fallback.db")],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["driver"] == "sqlite3" and info["row"]
    forced = subprocess.run(
        [sys.executable, "-c", blocked + SCRIPT, str(tmp_path / "forced.db")],
        env=dict(env, HERMES_SQLITE_DRIVER="pysqlite3"), capture_output=True, text=True, timeout=60,
    )
    assert forced.returncode != 0
    assert "HERMES_SQLITE_DRIVER=pysqlite3 but the pysqlite3 package is not installed" in forced.stderr
