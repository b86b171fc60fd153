"""The queue of a turn lease: a free lease goes to the waiter that began waiting first (both backends).

Stores on one database stand for workers; ``test_turn_lease_processes.py``
runs the same with real processes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from hermes_state import StoreClosedError

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


def slow_release_listener(db: Any, seconds: float) -> None:
    """Make setting up ``db``'s listener for releases of other processes take ``seconds`` longer.

    A cold store's first connection (PostgreSQL's LISTEN) or socket (SQLite) costs that
    much when many workers start at once; the database itself is untouched.
    """
    backend = db._backend
    listener = getattr(backend, "_lease_listener", None)
    if listener is not None:  # PostgreSQL: the LISTEN connection
        connect = listener._connect

        async def slow_connect(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(seconds)
            return await connect(*args, **kwargs)

        listener._connect = slow_connect
        return
    sockets = backend._wake_sockets()  # SQLite: the wake-up socket, bound on a worker thread
    bind = sockets._bind

    def slow_bind() -> Any:
        time.sleep(seconds)
        return bind()

    sockets._bind = slow_bind


async def cold_worker(store: Any, seconds: float) -> Any:
    """Another worker on ``store``'s database, open, whose release listener is not set up yet and takes
    ``seconds`` longer to set up (see :func:`slow_release_listener`)."""
    db = other_store(store)
    await db.get_session("s")
    slow_release_listener(db, seconds)
    return db


async def test_a_cold_store_takes_its_place_in_line_before_it_listens(store: Any) -> None:
    await store.create_session("s", "cli")
    await store.create_session("warm-up", "cli")
    cold, warm = await cold_worker(store, 1.0), other_store(store)
    try:
        assert await warm.acquire_session_turn_lease("warm-up", "w", wait_seconds=1)
        await warm.release_session_turn_lease("warm-up", "w")
        assert warm._backend.lease_releases_watched() and not cold._backend.lease_releases_watched()
        assert await store.try_acquire_session_turn_lease("s", "holder")
        order: list[str] = []

        async def wait(db: Any, name: str) -> None:
            assert await db.acquire_session_turn_lease("s", name, wait_seconds=30, poll_interval_seconds=20)
            order.append(name)
            await db.release_session_turn_lease("s", name)

        first = asyncio.create_task(wait(cold, "cold"))
        await waiting(store, 1)
        assert not cold._backend.lease_releases_watched()  # queued while its listener is still on the way
        second = asyncio.create_task(wait(warm, "warm"))
        await waiting(store, 2)
        await store.release_session_turn_lease("s", "holder")
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert order == ["cold", "warm"]  # asked first, served first
    finally:
        await cold.close()
        await warm.close()


async def test_a_release_before_the_listener_is_up_is_not_missed(store: Any) -> None:
    await store.create_session("s", "cli")
    cold = await cold_worker(store, 0.5)
    try:
        assert await store.try_acquire_session_turn_lease("s", "holder")
        started = time.monotonic()
        acquiring = asyncio.create_task(
            cold.acquire_session_turn_lease("s", "cold", wait_seconds=30, poll_interval_seconds=20)
        )
        await waiting(store, 1)
        # Released without a word this store could hear: by another process, before it listened.
        await raw_exec(store, "DELETE FROM session_turn_leases WHERE conversation_id = ?", ("s",))
        assert await asyncio.wait_for(acquiring, 10)  # its look once listening, not its 20 s poll
        assert time.monotonic() - started < 5
    finally:
        await cold.close()


async def test_a_listener_still_starting_at_close_is_closed_too(store: Any) -> None:
    await store.create_session("s", "cli")
    cold = await cold_worker(store, 0.3)
    assert await cold.acquire_session_turn_lease("s", "cold", wait_seconds=5)  # free: granted before it listens
    await cold.release_session_turn_lease("s", "cold")
    await cold.close()  # waits for the set-up it started, then closes what that opened
    await asyncio.sleep(0.4)
    assert not cold._backend.lease_releases_watched()


async def test_the_first_wait_notice_does_not_wait_for_the_listener(store: Any) -> None:
    await store.create_session("s", "cli")
    cold = await cold_worker(store, 1.0)
    try:
        assert await store.try_acquire_session_turn_lease("s", "holder")
        calls: list[float] = []
        assert not await cold.acquire_session_turn_lease(
            "s", "cold", wait_seconds=1.5, poll_interval_seconds=0.05, on_wait=calls.append
        )
        assert calls and calls[0] < 0.5  # after the first failed attempt, as documented
    finally:
        await cold.close()


async def test_close_on_the_home_loop_while_a_wait_on_another_loop_sets_its_listener_up(store: Any) -> None:
    """The set-up task lives on the waiter's loop: close() on the store's home loop waits for it there."""
    await store.create_session("s", "cli")
    db = await cold_worker(store, 0.5)  # home: this loop
    assert await store.try_acquire_session_turn_lease("s", "holder")
    outcome: list[BaseException | bool] = []

    def waiter() -> None:
        async def wait() -> bool:
            return await db.acquire_session_turn_lease("s", "elsewhere", wait_seconds=5, poll_interval_seconds=20)

        try:
            outcome.append(asyncio.run(wait()))
        except BaseException as exc:  # noqa: BLE001  (what the other thread saw is asserted below)
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    await waiting(store, 1)  # queued from the other loop; its listener still on the way
    await db.close()  # once raised RuntimeError: a Future attached to a different loop
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive() and len(outcome) == 1
    assert outcome[0] is False or isinstance(outcome[0], StoreClosedError), outcome
    assert not db._backend.lease_releases_watched()
