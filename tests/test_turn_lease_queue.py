"""The queue of a turn lease: a free lease goes to the waiter that began waiting first (both backends).

Stores on one database stand for workers; ``test_turn_lease_processes.py``
runs the same with real processes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .raw_sql import fetch_rows, raw_exec
from .test_turn_leases import lease_row, other_store


async def waiting(store: Any, count: int) -> None:
    """Until ``count`` waiters are queued."""
    deadline = time.monotonic() + 10
    while len(await fetch_rows(store, "SELECT ticket FROM session_turn_waiters")) < count:
        assert time.monotonic() < deadline, "waiters did not queue"
        await asyncio.sleep(0.02)


async def test_waiters_get_the_lease_in_the_order_they_began_waiting(store: Any) -> None:
    await store.create_session("s", "cli")
    workers = [other_store(store) for _ in range(3)]
    try:
        assert await store.try_acquire_session_turn_lease("s", "first")
        order: list[str] = []

        async def wait(db: Any, name: str) -> None:
            assert await db.acquire_session_turn_lease("s", name, wait_seconds=30, poll_interval_seconds=0.05)
            order.append(name)
            await asyncio.sleep(0.1)
            await db.release_session_turn_lease("s", name)

        tasks = []
        for k, db in enumerate(workers):
            tasks.append(asyncio.create_task(wait(db, f"w{k}")))
            await waiting(store, k + 1)
        # Somebody new, not waiting, does not jump the queue of a free lease.
        await store.release_session_turn_lease("s", "first")
        assert not await store.try_acquire_session_turn_lease("s", "intruder")
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
        assert order == ["w0", "w1", "w2"]
        assert await fetch_rows(store, "SELECT * FROM session_turn_waiters") == []
        assert await store.try_acquire_session_turn_lease("s", "intruder")  # nobody waits any more
    finally:
        for db in workers:
            await db.close()


async def test_dead_and_expired_waiters_are_skipped(store: Any) -> None:
    await store.create_session("s", "cli")
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    from hermes_state.lease_host import LOCAL_HOST

    now = time.time()
    # Queued before anyone (tickets below any the store draws): a waiter whose process on this host is gone, and one whose ticket expired.
    await raw_exec(
        store,
        "INSERT INTO session_turn_waiters (ticket, conversation_id, holder, expires_at, holder_host, holder_pid, "
        "holder_started) VALUES (-3, 's', 'dead', ?, ?, ?, 1), (-2, 's', 'stale', ?, NULL, NULL, NULL)",
        (now + 600, LOCAL_HOST, gone.pid, now - 1),
    )
    assert await store.acquire_session_turn_lease("s", "live", wait_seconds=5, poll_interval_seconds=0.05)
    assert await fetch_rows(store, "SELECT ticket FROM session_turn_waiters") == []
    await store.release_session_turn_lease("s", "live")
    # A live waiter on another host is waited for, until its ticket expires.
    expires = time.time() + 1.0
    await raw_exec(
        store,
        "INSERT INTO session_turn_waiters (ticket, conversation_id, holder, expires_at, holder_host, holder_pid, "
        "holder_started) VALUES (-1, 's', 'remote', ?, 'another-boot:1:1', 1, 1)",
        (expires,),
    )
    assert not await store.try_acquire_session_turn_lease("s", "live")
    assert await store.acquire_session_turn_lease("s", "live", wait_seconds=10, poll_interval_seconds=0.05)
    assert time.time() >= expires - 0.05


async def test_a_waiter_that_stops_waiting_leaves_the_queue(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "holder")
    waiter = asyncio.create_task(store.acquire_session_turn_lease("s", "w", wait_seconds=30, poll_interval_seconds=0.05))
    await waiting(store, 1)
    waiter.cancel()
    try:
        await waiter
    except asyncio.CancelledError:
        pass
    assert await fetch_rows(store, "SELECT ticket FROM session_turn_waiters") == []
    assert not await store.acquire_session_turn_lease("s", "w", wait_seconds=0.2, poll_interval_seconds=0.05)
    assert await fetch_rows(store, "SELECT ticket FROM session_turn_waiters") == []  # timed out: gone too
    assert (await lease_row(store, "s"))[0] == "holder"
