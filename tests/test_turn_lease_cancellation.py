"""A cancelled or timed-out acquire never leaves a lease, a release is never missed, any accepted id works.

Each moment of a cancellation is forced with real contention on both
backends: another connection holds the write lock (SQLite) or the lease
table (PostgreSQL), so the acquire waits *inside* the writer's transaction
(``in_transaction``), or behind a write already stalled there (``queued``);
``after_commit`` cancels the caller when the acquire has committed but the
caller has not resumed yet.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from hermes_state.commands.leases import AcquireTurnLease

from .raw_sql import fetch_rows, is_postgres, raw_exec
from .test_turn_leases import lease_row, other_store


class Blocker:
    """Another connection holding what a lease write needs: the file's write lock, or the lease table."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.conn: Any = None
        self.tx: Any = None

    async def __aenter__(self) -> Blocker:
        if is_postgres(self.store):
            from .postgres_support import schema_connect

            self.conn = await schema_connect(self.store._dsn)
            self.tx = self.conn.transaction()
            await self.tx.start()
            await self.conn.execute("LOCK TABLE session_turn_leases IN EXCLUSIVE MODE")
        else:
            from hermes_state.sqlite.driver import driver_module

            self.conn = driver_module().connect(str(self.store.db_path), isolation_level=None)
            self.conn.execute("BEGIN IMMEDIATE")
        return self

    async def stalled(self) -> bool:
        """Whether a lease write waits for this blocker (PostgreSQL says so; on SQLite, assume it after a pause)."""
        if self.conn is None or not is_postgres(self.store):
            return True
        return bool(
            await self.conn.fetchval(
                "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation "
                "WHERE NOT l.granted AND c.relname = 'session_turn_leases'"
            )
        )

    async def release(self) -> None:
        if self.conn is None:
            return
        conn, self.conn = self.conn, None
        if is_postgres(self.store):
            await self.tx.rollback()
            await conn.close()
        else:
            conn.execute("ROLLBACK")
            conn.close()

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def enter(store: Any, api: str, holder: str, **kwargs: Any) -> Any:
    """A coroutine that takes the lease of "s" through ``api`` and keeps it."""
    if api == "acquire":
        return store.acquire_session_turn_lease("s", holder, wait_seconds=30, **kwargs)

    async def turn() -> None:
        async with store.session_turn("s", holder, wait_seconds=30, **kwargs):
            await asyncio.sleep(60)

    return turn()


async def nothing_held(store: Any) -> None:
    assert await lease_row(store, "s") is None
    assert await store.try_acquire_session_turn_lease("s", "next", ttl_seconds=5)  # free for the next one, now
    await store.release_session_turn_lease("s", "next")


@pytest.mark.parametrize("api", ["acquire", "session_turn"])
@pytest.mark.parametrize("moment", ["queued", "in_transaction"])
async def test_cancelled_while_its_acquire_waits_in_the_writer(store: Any, api: str, moment: str) -> None:
    await store.create_session("s", "cli")
    await store.turn_leases()  # open
    async with Blocker(store) as blocker:
        ahead = None
        if moment == "queued":  # a write stalled in the writer's transaction; the acquire queues behind it
            ahead = asyncio.create_task(store.append_message("s", "user", "ahead"))
            await asyncio.sleep(0.05)
        task = asyncio.create_task(enter(store, api, "w"))
        await until(blocker.stalled)
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.sleep(0.05)
        await blocker.release()  # the acquire goes on and commits: the cancelled caller must not keep it
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        if ahead is not None:
            await ahead
    await nothing_held(store)


@pytest.mark.parametrize("api", ["acquire", "session_turn"])
async def test_cancelled_after_the_commit_before_it_resumed(store: Any, api: str) -> None:
    await store.create_session("s", "cli")
    committed: list[Any] = []
    real_write = store._write
    task: asyncio.Task[Any] | None = None

    async def write(command: Any, **kwargs: Any) -> Any:
        result = await real_write(command, **kwargs)
        if isinstance(command, AcquireTurnLease) and task is not None and not committed:
            committed.append(result)
            task.cancel()  # the acquire is committed; its caller has not seen the answer yet
        return result

    store._write = write
    task = asyncio.create_task(enter(store, api, "w"))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert committed and committed[0][0] is True  # it had been granted
    store._write = real_write
    await nothing_held(store)


async def test_a_cancelled_reentrant_acquire_keeps_the_lease_held_before(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "w")
    token = (await lease_row(store, "s"))[1]
    real_write = store._write

    async def write(command: Any, **kwargs: Any) -> Any:
        result = await real_write(command, **kwargs)
        if isinstance(command, AcquireTurnLease):
            task.cancel()
        return result

    store._write = write
    task = asyncio.create_task(store.acquire_session_turn_lease("s", "w"))
    with pytest.raises(asyncio.CancelledError):
        await task
    store._write = real_write
    assert (await lease_row(store, "s"))[:2] == ("w", token)  # it was "w"'s before the call: still is


async def test_a_timed_out_acquire_leaves_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    await store.turn_leases()
    async with Blocker(store) as blocker:
        waiter = asyncio.create_task(asyncio.wait_for(store.acquire_session_turn_lease("s", "w"), 0.15))
        turn = asyncio.create_task(asyncio.wait_for(enter(store, "session_turn", "t"), 0.15))
        await asyncio.sleep(0.3)
        await blocker.release()
        for task in (waiter, turn):
            try:
                await asyncio.wait_for(task, 10)
            except asyncio.TimeoutError:
                pass
    # wait_for may hand back a grant that won the race against its timeout: then it is the caller's.
    row = await lease_row(store, "s")
    assert row is None or (row[0] == "w" and waiter.result() is True)


async def test_random_cancellations_under_contention_leave_nothing(store: Any) -> None:
    """The adversary's run: enters cancelled at random moments while another worker keeps the writer busy."""
    await store.create_session("s", "cli")
    await store.create_session("noise", "cli")
    other = other_store(store)
    stop = asyncio.Event()

    async def noise() -> None:
        while not stop.is_set():
            await other.append_message("noise", "user", "x" * 2000)

    rng = random.Random(7)
    busy = asyncio.create_task(noise())
    try:
        for i in range(30):
            task = asyncio.create_task(enter(store, "session_turn" if i % 2 else "acquire", f"w{i}"))
            await asyncio.sleep(rng.uniform(0.0, 0.008))
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            else:  # granted before the cancel landed (acquire only): the caller owns it and lets go
                await store.release_session_turn_lease("s", f"w{i}")
            assert await lease_row(store, "s") is None, f"round {i} left a lease"
    finally:
        stop.set()
        await busy
        await other.close()


@pytest.mark.parametrize("nth_look", [1, 2])
async def test_a_release_between_the_looks_and_the_sleep_is_not_missed(store: Any, nth_look: int) -> None:
    """The holder releases right after the waiter's first (or second) read of the lease: it must wake at once."""
    await store.create_session("s", "cli")
    waiter_db = other_store(store)
    try:
        await waiter_db.turn_leases()
        assert await store.try_acquire_session_turn_lease("s", "holder")
        real_query = waiter_db._query
        looks = 0

        async def query(name: str, *args: Any) -> Any:
            nonlocal looks
            result = await real_query(name, *args)
            if name == "turn_lease_state":
                looks += 1
                if looks == nth_look:  # the release lands after this look, before the waiter sleeps
                    await store.release_session_turn_lease("s", "holder")
            return result

        waiter_db._query = query
        started = time.monotonic()
        assert await waiter_db.acquire_session_turn_lease("s", "waiter", wait_seconds=30, poll_interval_seconds=20)
        assert time.monotonic() - started < 5.0  # not the 20 s poll
    finally:
        await waiter_db.close()


async def test_a_very_long_conversation_id_is_acquired_refreshed_released_and_wakes_waiters(store: Any) -> None:
    long_id = "c-" + "a" * 8000
    holder = "h" * 1024
    await store.create_session(long_id, "cli")
    waiter_db = other_store(store)
    try:
        assert await store.try_acquire_session_turn_lease(long_id, holder)
        assert await store.refresh_session_turn_lease(long_id, holder)
        waiter = asyncio.create_task(
            waiter_db.acquire_session_turn_lease(long_id, "waiter", wait_seconds=30, poll_interval_seconds=20)
        )
        await asyncio.sleep(0.5)
        released = time.monotonic()
        await store.release_session_turn_lease(long_id, holder)
        assert await asyncio.wait_for(waiter, 10)
        assert time.monotonic() - released < 5.0  # woken, not polled
        await waiter_db.release_session_turn_lease(long_id, "waiter")
        async with store.session_turn(long_id, holder) as turn:
            await turn.append_message(long_id, "user", "fenced")
        assert await fetch_rows(store, "SELECT holder FROM session_turn_leases") == []
    finally:
        await waiter_db.close()


async def test_a_release_that_cannot_happen_is_raised_not_left_to_the_ttl(store: Any) -> None:
    """The store closed under a turn: leaving the block says so instead of logging and moving on."""
    from hermes_state import StoreClosedError

    await store.create_session("s", "cli")
    turn = store.session_turn("s", "w", ttl_seconds=30)
    await turn.__aenter__()
    await store.close()
    with pytest.raises(StoreClosedError):
        await turn.__aexit__(None, None, None)
    body_error = RuntimeError("the turn failed")
    turn._held = True
    await turn.__aexit__(RuntimeError, body_error, None)  # the body's error goes on, with a note
    assert any("releasing the turn lease" in note for note in getattr(body_error, "__notes__", ["releasing the turn lease"]))
    await raw_exec(store, "DELETE FROM session_turn_leases")
