"""Upstream's two PostgreSQL races (spec upstream-2026-08 §6.7e and §6.7f), forced from outside and shown impossible.

A third connection holds ``LOCK TABLE messages`` so a write stalls after its
transaction took its row locks; meanwhile another worker tries what upstream
let slip through: a takeover of the lease (e), a compaction (f).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_state import SessionTurnLeaseLostError
from hermes_state.postgres import SessionDB

from .postgres_support import schema_connect

pytestmark = pytest.mark.backends("postgres")


async def _stalled_on_messages(conn: Any) -> bool:
    """Whether some backend waits for the lock on ``messages`` (the stalled write)."""
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation "
            "WHERE NOT l.granted AND c.relname = 'messages' AND c.relnamespace = "
            "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        )
    )


async def _until(check: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_takeover_waits_for_a_fenced_write_in_flight(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as a, SessionDB(pg_dsn) as b:
        await a.create_session("root", "cli")
        await a.publish_compression_child(
            parent_session_id="root", child_session_id="tip", source="cli",
            messages=[{"role": "user", "content": "summary"}], require_compression_lease=False,
        )
        assert await a.try_acquire_session_turn_lease("tip", "A", ttl_seconds=1.0)
        blocker = await schema_connect(pg_dsn)
        try:
            stall = blocker.transaction()
            await stall.start()
            await blocker.execute("LOCK TABLE messages IN EXCLUSIVE MODE")
            in_flight = asyncio.create_task(
                a.append_message("tip", "user", "A, in flight", turn_lease_holder="A", turn_lease_ttl_seconds=0.2)
            )
            await _until(lambda: _stalled_on_messages(blocker))  # A passed its fence and waits to insert
            await asyncio.sleep(1.2)  # A's lease expires meanwhile
            # B takes over through the root's id (no session row in common with A's write).
            takeover = asyncio.create_task(
                b.acquire_session_turn_lease("root", "B", ttl_seconds=60, wait_seconds=20, poll_interval_seconds=0.05)
            )
            await asyncio.sleep(1.0)
            assert not takeover.done()  # it waits for A's transaction (the lease row is locked)
            assert not in_flight.done()
            await stall.rollback()
        finally:
            await blocker.close()
        # A's write committed under A's lease (and, finding it expired but not taken over, renewed
        # it for its 0.2 s TTL); only then could B take it over.
        a_row = await asyncio.wait_for(in_flight, 20)
        assert await asyncio.wait_for(takeover, 20) is True
        with pytest.raises(SessionTurnLeaseLostError):
            await a.append_message("tip", "user", "A, stale", turn_lease_holder="A")
        b_row = await b.append_message("tip", "user", "B", turn_lease_holder="B")
        rows = await b.get_messages("tip")
        assert [m["content"] for m in rows] == ["summary", "A, in flight", "B"]
        assert a_row < b_row


async def test_an_append_in_flight_during_compaction_never_lands_before_the_summary(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as writer, SessionDB(pg_dsn) as compactor:
        await writer.create_session("s", "cli")
        for i in range(4):
            await writer.append_message("s", "user", f"old {i}")
        watermark = await compactor.get_active_message_watermark("s")
        blocker = await schema_connect(pg_dsn)
        try:
            stall = blocker.transaction()
            await stall.start()
            await blocker.execute("LOCK TABLE messages IN EXCLUSIVE MODE")
            in_flight = asyncio.create_task(writer.append_message("s", "user", "in flight"))
            await _until(lambda: _stalled_on_messages(blocker))
            compaction = asyncio.create_task(
                compactor.archive_and_compact("s", [{"role": "user", "content": "SUMMARY"}], watermark=watermark)
            )
            await asyncio.sleep(0.5)
            assert not compaction.done()  # it waits for the append's session row lock
            await stall.rollback()
        finally:
            await blocker.close()
        await asyncio.wait_for(in_flight, 20)
        assert await asyncio.wait_for(compaction, 20) == 2  # the summary and the cloned in-flight row
        live = await compactor.get_messages("s")
        assert [m["content"] for m in live] == ["SUMMARY", "in flight"]
        assert (await compactor.get_session("s"))["message_count"] == 2
        archived = [m["content"] for m in await compactor.get_messages("s", include_inactive=True) if not m["active"]]
        assert archived == ["old 0", "old 1", "old 2", "old 3", "in flight"]
