"""A host's own BlockBuster, as the reference's tests use it: everything on the loop is checked, not only the store's frames.

The suite-wide fixture (tests/conftest.py) checks calls with a store frame on
the stack. Here, as in the reference's tests, an unrestricted ``BlockBuster()``
is active from before the store exists until after it closed: the lazy import
of the backend, the open (config, directories, zeroed-file probe, schema,
asyncpg's client files), writes, reads, search, the lease path, the
module-level helpers and close.
"""

from __future__ import annotations

from pathlib import Path

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
