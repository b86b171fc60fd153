"""``async with SessionDB(...) as db`` on both backends: returns the store, closes it, never swallows errors.

Closing is checked from outside the store: SQLite file descriptors of this
process that point at the database, PostgreSQL connections in
``pg_stat_activity`` under an application name only this test's store uses.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from hermes_state import SessionDB, StoreClosedError
from tests.postgres_support import admin_connect, server_dsn
from tests.raw_sql import is_postgres, open_store, store_target


def tag_connections(db: Any, home: Path) -> str:
    """Give the store's future connections a unique application name (PostgreSQL); returns it."""
    name = f"hermes-ctx-{uuid.uuid4().hex[:12]}"
    if is_postgres(db):
        config = {"database": {"postgres": {"connect_args": {"server_settings": {"application_name": name}}}}}
        (home / "config.yaml").write_text(yaml.safe_dump(config))
    return name


async def open_handles(db: Any, name: str) -> int:
    """How many connections or file descriptors the store holds on its database right now."""
    if is_postgres(db):
        conn = await admin_connect(server_dsn())
        try:
            return int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name))
        finally:
            await conn.close()
    target = os.path.realpath(db.db_path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(target):
                count += 1
        except OSError:
            continue
    return count


async def test_async_with_returns_the_store_and_closes_it(store: SessionDB, hermes_home: Path) -> None:
    name = tag_connections(store, hermes_home)
    async with store as db:
        assert db is store
        assert not db.closed
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "inside the block")
        assert await open_handles(store, name) >= 1
    assert store.closed
    assert await open_handles(store, name) == 0
    with pytest.raises(StoreClosedError):
        await store.get_session("s")
    with pytest.raises(StoreClosedError):
        async with store:
            pass
    other = open_store(store_target(store))
    async with other:
        assert [m["content"] for m in await other.get_messages("s")] == ["inside the block"]


async def test_an_exception_propagates_and_the_store_still_closes(store: SessionDB, hermes_home: Path) -> None:
    name = tag_connections(store, hermes_home)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with store as db:
            await db.create_session("s", "cli")
            raise Boom()
    assert store.closed
    assert await open_handles(store, name) == 0
    other = open_store(store_target(store))
    async with other:
        assert await other.get_session("s") is not None  # what committed before the error stays


async def test_close_inside_the_block_is_safe(store: SessionDB, hermes_home: Path) -> None:
    name = tag_connections(store, hermes_home)
    async with store as db:
        await db.create_session("s", "cli")
        await db.close()
        assert db.closed
        with pytest.raises(StoreClosedError):
            await db.append_message("s", "user", "after close")
    assert await open_handles(store, name) == 0
    await store.close()  # and again after the block


async def test_an_unopened_store_opens_on_entry(db_path: Path) -> None:
    async with SessionDB(db_path) as db:
        assert repr(db).endswith(" open>") and db_path.exists()  # entering opens (and creates) the database
    assert repr(db).endswith(" closed>")
