"""One store, any event loop: ``asyncio.run`` turn after turn, loops in many threads at once.

The store's home loop is the loop of its first call; a call from another
loop either moves the store there (the home closed) or is handed to the
store's own loop thread (the home runs elsewhere). Every write lands, once.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pyleak import no_task_leaks

from hermes_state.errors import EventLoopUnavailableError


def in_thread(fn: Any) -> Any:
    """Run ``fn()`` in a new thread and return its result (or raise its error)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the thread hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


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

    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def thread(n: int) -> None:
        start.wait()
        try:
            results[n] = asyncio.run(writer(n))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    ids = [i for n in range(10) for i in results[n]]
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


def test_a_stopped_loop_with_a_call_in_flight_refuses_at_once(store: Any) -> None:
    held = asyncio.new_event_loop()
    try:
        held.run_until_complete(store.create_session("s", "cli"))
        release = asyncio.Event()
        stuck = held.create_task(store._at_home(release.wait))  # I/O of the store still running there
        held.run_until_complete(asyncio.sleep(0.01))
        with pytest.raises(EventLoopUnavailableError, match="stopped with a store call in flight"):
            in_thread(lambda: asyncio.run(store.get_session("s")))
        release.set()
        held.run_until_complete(stuck)
    finally:
        held.close()
    assert in_thread(lambda: asyncio.run(store.get_session("s")))["id"] == "s"  # closed and idle: it moves
