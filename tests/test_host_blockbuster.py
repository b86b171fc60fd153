"""A host's own BlockBuster, as the reference's tests use it: everything on the loop is checked, not only the store's frames.

The suite-wide fixture (tests/conftest.py) checks calls with a store frame on
the stack. Here, as in the reference's tests, an unrestricted ``BlockBuster()``
is active from before the store exists until after it closed: the lazy import
of the backend, the open (config, directories, zeroed-file probe, schema,
asyncpg's client files), writes, reads, search, the lease path, the
module-level helpers and close.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster

import hermes_state
from hermes_state.sqlite.driver import open_connection


async def _lifecycle(db: hermes_state.SessionDB) -> None:
    await db.create_session("s", "cli", model="m")
    await db.append_message("s", "user", "hello from a host under blockbuster")
    assert await db.message_count("s") == 1
    assert [hit["session_id"] for hit in await db.search_messages("blockbuster")] == ["s"]
    async with db.session_turn("s", "host-turn") as turn:
        await db.append_message("s", "assistant", "fenced", turn_lease_holder=turn.holder)
    assert [m["content"] for m in await db.get_messages("s")][-1] == "fenced"
    await db.close()


async def test_a_sqlite_store_lives_and_closes_under_a_hosts_blockbuster(db_path: Path) -> None:
    blocker = BlockBuster()
    blocker.activate()
    try:
        await _lifecycle(hermes_state.SessionDB(db_path))
        conn = await open_connection(str(db_path.with_name("host.db")))
        try:
            assert await hermes_state.apply_wal_with_fallback(conn) in ("wal", "delete")
            await hermes_state.apply_database_pragmas(conn)
        finally:
            await conn.close()
        assert not await hermes_state.is_zeroed_state_db(db_path)
        assert (await hermes_state.repair_state_db_schema(db_path, backup=False))["ok"]
        assert await hermes_state.resolved_max_resume_messages() == 20000
    finally:
        blocker.deactivate()


async def test_a_postgres_store_lives_and_closes_under_a_hosts_blockbuster(pg_dsn: str) -> None:
    from hermes_state.postgres import SessionDB as PostgresSessionDB

    blocker = BlockBuster()
    blocker.activate()
    try:
        await _lifecycle(PostgresSessionDB(pg_dsn))
    finally:
        blocker.deactivate()


class _RefusingExecutor(ThreadPoolExecutor):
    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the store used the event loop's default executor")


def _refuse_to_thread(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the store called asyncio.to_thread")


async def _keeps_off_the_hosts_executor(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lifecycle with a lease hand-off between two cold stores, the host's executor and to_thread refused.

    Hosts fill the default executor with blocking work of their own; async-hermes-agent's
    turns assert they never call ``asyncio.to_thread``.
    """
    asyncio.get_running_loop().set_default_executor(_RefusingExecutor(1))
    monkeypatch.setattr(asyncio, "to_thread", _refuse_to_thread)
    first, second = make(), make()
    try:
        await first.create_session("s", "cli")
        async with first.session_turn("s", "one") as turn:
            waiting = asyncio.ensure_future(second.acquire_session_turn_lease("s", "two", wait_seconds=30))
            await turn.append_message("s", "user", "first")
            await asyncio.sleep(0.1)
        assert await asyncio.wait_for(waiting, 10)
        await second.release_session_turn_lease("s", "two")
        assert [m["content"] for m in await second.get_messages("s")] == ["first"]
        assert [hit["session_id"] for hit in await second.search_messages("first")] == ["s"]
    finally:
        await first.close()
        await second.close()


async def test_a_sqlite_store_keeps_off_the_hosts_executor(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _keeps_off_the_hosts_executor(lambda: hermes_state.SessionDB(db_path), monkeypatch)


async def test_a_postgres_store_keeps_off_the_hosts_executor(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_state.postgres import SessionDB as PostgresSessionDB

    await _keeps_off_the_hosts_executor(lambda: PostgresSessionDB(pg_dsn), monkeypatch)


def test_the_first_import_of_the_store_on_a_running_loop_blocks_nothing(tmp_path: Path) -> None:
    """A fresh interpreter whose first ``hermes_state.SessionDB`` (the lazy import of the store) happens
    on a loop under a host's BlockBuster, as async-hermes-agent's zeroed-file tests do."""
    script = (
        "import asyncio, sys\n"
        "from blockbuster import BlockBuster\n"
        "import hermes_state\n"
        "async def main():\n"
        "    blocker = BlockBuster(); blocker.activate()\n"
        "    try:\n"
        "        db = hermes_state.SessionDB(sys.argv[1])\n"
        "        await db.create_session('s', 'cli')\n"
        "        async with db.session_turn('s', 'host') as turn:\n"
        "            await turn.append_message('s', 'user', 'hi')\n"
        "        await db.close()\n"
        "    finally:\n"
        "        blocker.deactivate()\n"
        "asyncio.run(main())\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "state.db")], capture_output=True, text=True, timeout=120,
        env={**os.environ, "HERMES_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
