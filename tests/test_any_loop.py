"""One store, any event loop: ``asyncio.run`` turn after turn, loops in many threads at once.

The store's home loop is the loop of its first call; a call from another
loop either moves the store there (the home closed) or is handed to the
store's own loop thread (the home runs elsewhere). Every write lands, once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from pyleak import no_task_leaks

from hermes_state.errors import EventLoopUnavailableError


def in_threads(fns: list[Any], timeout: float = 120) -> list[Any]:
    """Run each ``fn()`` in a thread of its own, all at once; return their results in order (or raise the first error)."""
    out: list[dict[str, Any]] = [{} for _ in fns]

    def target(fn: Any, slot: dict[str, Any]) -> None:
        try:
            slot["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            slot["error"] = exc

    threads = [threading.Thread(target=target, args=(fn, slot)) for fn, slot in zip(fns, out)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    for slot in out:
        if "error" in slot:
            raise slot["error"]
    return [slot["value"] for slot in out]


def in_thread(fn: Any) -> Any:
    """Run ``fn()`` in a new thread and return its result (or raise its error)."""
    return in_threads([fn])[0]


def test_asyncio_run_turn_after_turn_in_a_thread(store: Any) -> None:
    async def turn(i: int) -> int:
        async with no_task_leaks(action="raise"):
            await store.ensure_session("s", "cli")
            await store.append_message("s", "user", f"turn {i}")
            return int(await store.message_count("s"))

    def script() -> list[int]:
        return [asyncio.run(turn(i)) for i in range(4)]

    assert in_thread(script) == [1, 2, 3, 4]
    assert in_thread(lambda: asyncio.run(turn(4))) == 5  # another thread, another loop: the store follows
    assert not any(t.name == "hermes-state-store-loop" for t in threading.enumerate() if t.is_alive())


def test_ten_threads_with_their_own_loops_write_at_once(store: Any) -> None:
    per_thread = 25
    start = threading.Barrier(10)

    async def writer(n: int) -> list[int]:
        await store.ensure_session(f"s{n}", "cli")
        ids = []
        for i in range(per_thread):
            ids.append(await store.append_message(f"s{n}", "user", f"{n}-{i}"))
            if i % 5 == 0:
                assert len(await store.get_messages(f"s{n}")) == i + 1
        return ids

    def thread(n: int) -> list[int]:
        start.wait()
        return asyncio.run(writer(n))

    results = in_threads([lambda n=n: thread(n) for n in range(10)])
    ids = [i for per in results for i in per]
    assert len(ids) == len(set(ids)) == 10 * per_thread

    async def count() -> list[int]:
        return [len(await store.get_messages(f"s{n}")) for n in range(10)]

    assert in_thread(lambda: asyncio.run(count())) == [per_thread] * 10


async def test_a_running_home_and_other_loops_share_the_store(store: Any) -> None:
    """The test's loop keeps running while threads write: the store moves to its own loop thread."""
    await store.create_session("s", "cli")
    first = await store.append_message("s", "user", "home loop")

    def other(n: int) -> int:
        async def go() -> int:
            return int(await store.append_message("s", "user", f"thread {n}"))
        return asyncio.run(go())

    ids = await asyncio.gather(*(asyncio.to_thread(other, n) for n in range(4)))
    ids.append(await store.append_message("s", "user", "home loop again"))
    rows = await store.get_messages("s")
    assert [r["id"] for r in rows] == sorted([first, *ids])
    assert len(rows) == 6
    assert store.loop is not asyncio.get_running_loop()  # handed to the store's own loop thread


def test_a_stopped_loop_with_a_call_in_flight_is_refused_not_waited_for(store: Any) -> None:
    held = asyncio.new_event_loop()
    try:
        held.run_until_complete(store.create_session("s", "cli"))
        release = asyncio.Event()
        stuck = held.create_task(store._at_home(release.wait))  # I/O of the store still running there
        held.run_until_complete(asyncio.sleep(0.01))
        started = time.monotonic()
        with pytest.raises(EventLoopUnavailableError, match="stopped with a store call in flight"):
            in_thread(lambda: asyncio.run(store.get_session("s")))
        assert time.monotonic() - started < 10
        release.set()
        held.run_until_complete(stuck)
    finally:
        held.close()
    assert in_thread(lambda: asyncio.run(store.get_session("s")))["id"] == "s"  # closed and idle: it moves


def test_two_loops_at_first_use_both_succeed(store: Any) -> None:
    start = threading.Barrier(2)

    def first_use(n: int) -> None:
        async def go() -> None:
            start.wait()
            await store.ensure_session(f"s{n}", "cli")
            await store.append_message(f"s{n}", "user", "hello")

        asyncio.run(go())

    in_threads([lambda n=n: first_use(n) for n in range(2)], 60)

    async def counts() -> list[int]:
        return [int(await store.message_count(f"s{n}")) for n in range(2)]

    assert in_thread(lambda: asyncio.run(counts())) == [1, 1]


def test_close_from_another_thread_while_writes_are_in_flight(store: Any) -> None:
    """Every write either lands or raises StoreClosedError; none hangs, none sees WriterStoppedError."""
    from hermes_state import StoreClosedError

    in_thread(lambda: asyncio.run(store.create_session("s", "cli")))
    started = threading.Event()
    outcomes: list[Any] = []

    def writer() -> None:
        async def go() -> None:
            for i in range(200):
                try:
                    outcomes.append(await store.append_message("s", "user", f"m{i}"))
                except StoreClosedError:
                    outcomes.append("closed")
                    return
                started.set()

        try:
            asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001 - anything but StoreClosedError fails the test
            outcomes.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(30)
    in_thread(lambda: asyncio.run(store.close()))
    thread.join(60)
    assert not thread.is_alive()
    assert not [o for o in outcomes if isinstance(o, BaseException)]
    landed = [o for o in outcomes if o != "closed"]
    assert len(landed) == len(set(landed)) >= 1
    assert store.closed


@pytest.mark.backends("postgres")
def test_postgres_connections_of_a_closed_loop_are_ended(store: Any, pg_admin_dsn: str) -> None:
    import asyncpg

    async def first_turn() -> int:
        await store.create_session("s", "cli")
        await store.get_session("s")
        return int(store._backend._writer_conn.get_server_pid())

    old_writer = in_thread(lambda: asyncio.run(first_turn()))  # the loop closes with the store open

    async def second_turn() -> int:
        await store.append_message("s", "user", "after the move")
        return int(store._backend._writer_conn.get_server_pid())

    new_writer = in_thread(lambda: asyncio.run(second_turn()))
    assert new_writer != old_writer

    async def server_sessions() -> set[int]:
        conn = await asyncpg.connect(pg_admin_dsn)
        try:
            for _ in range(100):
                pids = {row["pid"] for row in await conn.fetch("SELECT pid FROM pg_stat_activity")}
                if old_writer not in pids:
                    return pids
                await asyncio.sleep(0.05)
            return pids
        finally:
            await conn.close()

    pids = in_thread(lambda: asyncio.run(server_sessions()))
    assert old_writer not in pids and new_writer in pids


async def test_token_counts_queued_from_other_loops_are_applied(store: Any) -> None:
    await store.create_session("s", "cli")

    def queue_from_a_thread(n: int) -> None:
        async def go() -> None:
            await store.queue_token_counts("s", input_tokens=n, output_tokens=1)
            assert await store.flush_token_counts()
        asyncio.run(go())

    await asyncio.gather(*(asyncio.to_thread(queue_from_a_thread, n) for n in range(1, 6)))
    await store.queue_token_counts("s", input_tokens=100)
    assert await store.flush_token_counts()
    session = await store.get_session("s")
    assert (session["input_tokens"], session["output_tokens"]) == (115, 5)
