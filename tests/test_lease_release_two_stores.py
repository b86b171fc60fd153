"""A compression lease ends when its holder releases it, and lives on while renewed, across two stores.

(Appends never wait for a compression lease; the compaction's watermark keeps them.)

Two stores on one database stand for two workers: the one holding the lease
renews and releases it, the other sees each change at once. The same test
runs on SQLite (two stores on one file) and PostgreSQL (two stores on one
schema); nothing here waits for a lease to expire.
"""

from __future__ import annotations

import asyncio

import pytest

from .conftest import BACKENDS
from .raw_sql import open_store

TTL = 60.0  # far longer than the test: only release and renewal can end or move a lease here


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, db_path: str) -> str:
    """A SQLite path, or a PostgreSQL DSN with a schema of its own."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return str(db_path)


async def test_release_by_the_holder_frees_the_other_store_at_once(target: str) -> None:
    holder, other = open_store(target), open_store(target)
    try:
        await holder.create_session("s", "cli")
        assert await holder.try_acquire_compression_lock("s", "compressor", ttl_seconds=TTL)
        assert await other.get_compression_lock_holder("s") == "compressor"
        assert not await other.try_acquire_compression_lock("s", "rival", ttl_seconds=TTL)

        # The lease serializes compressions only: the other store's append lands at once.
        row_id = await asyncio.wait_for(other.append_message("s", "user", "not held back"), timeout=2)
        await other.release_compression_lock("s", "rival")  # not the holder: no effect
        assert await holder.get_compression_lock_holder("s") == "compressor"
        assert not await other.try_acquire_compression_lock("s", "rival", ttl_seconds=TTL)

        await holder.release_compression_lock("s", "compressor")
        assert [m["id"] for m in await holder.get_messages("s")] == [row_id]
        assert await other.get_compression_lock_holder("s") is None
        assert await other.compression_leases() == []
        assert await other.try_acquire_compression_lock("s", "rival", ttl_seconds=TTL)
        assert not await holder.refresh_compression_lock("s", "compressor")  # released means gone
    finally:
        await holder.close()
        await other.close()


async def test_renewal_by_the_holder_is_seen_by_the_other_store(target: str) -> None:
    holder, other = open_store(target), open_store(target)
    try:
        await holder.create_session("s", "cli")
        assert await holder.try_acquire_compression_lock("s", "compressor", ttl_seconds=2.0)
        (first,) = await other.compression_leases()
        assert not await other.refresh_compression_lock("s", "rival", ttl_seconds=TTL)  # only the holder renews
        assert (await other.compression_leases())[0]["expires_at"] == first["expires_at"]

        assert await holder.refresh_compression_lock("s", "compressor", ttl_seconds=TTL)
        (renewed,) = await other.compression_leases()
        assert renewed["holder"] == "compressor" and renewed["acquired_at"] == first["acquired_at"]
        assert renewed["expires_at"] >= first["expires_at"] + TTL - 2.0 - 1.0
        await asyncio.sleep(2.5)  # past the first expiry: the renewal keeps it live
        assert await other.get_compression_lock_holder("s") == "compressor"
        assert not await other.try_acquire_compression_lock("s", "rival", ttl_seconds=TTL)
        await holder.release_compression_lock("s", "compressor")
        assert await other.append_message("s", "user", "accepted") > 0
    finally:
        await holder.close()
        await other.close()
