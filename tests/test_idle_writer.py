"""The writer task lives only while writes are queued: an idle store holds no task a leak check sees.

Group commit and the single writer stay as they were: a burst still goes in
one batch, the queue still drains on close, and a caller that writes again
the moment its previous write resolved is never left without a writer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pyleak import no_task_leaks


async def test_a_turn_that_opens_writes_and_leaves_the_store_open_leaks_no_task(store: Any) -> None:
    async with no_task_leaks(action="raise"):
        await store.create_session("s", "cli")  # opens the store lazily
        await store.append_message("s", "user", "hi")
        await asyncio.gather(*(store.append_message("s", "assistant", f"m{i}") for i in range(20)))
        assert len(await store.get_messages("s")) == 21
    assert store._actor.idle and not store.closed
    stats = await store.writer_stats()
    assert stats["running"] is True  # it still accepts writes
    await store.append_message("s", "user", "again")  # and the next write starts a writer again
    assert len(await store.get_messages("s")) == 22


async def test_a_burst_queued_behind_a_batch_commits_as_one(store: Any) -> None:
    await store.create_session("s", "cli")
    batches = store._actor.batches
    first = asyncio.ensure_future(store.append_message("s", "user", "first"))
    await asyncio.sleep(0)  # the writer took "first"; the burst queues behind it
    burst = [asyncio.ensure_future(store.append_message("s", "user", f"b{i}")) for i in range(40)]
    await asyncio.gather(first, *burst)
    assert store._actor.batches - batches == 2  # "first", then the 40 together
    assert store._actor.max_batch_seen >= 40
    assert store._actor.idle


async def test_a_write_right_after_the_last_one_resolved_is_never_stranded(store: Any) -> None:
    await store.create_session("s", "cli")

    async def writer(n: int) -> None:
        for i in range(30):
            await store.append_message("s", "user", f"{n}-{i}")
            if i % 3 == 0:
                await asyncio.sleep(0)  # land on either side of the writer's last look

    await asyncio.wait_for(asyncio.gather(*(writer(n) for n in range(5))), timeout=60)
    assert await store.message_count("s") == 150
    assert store._actor.idle


async def test_close_drains_what_is_queued(store: Any) -> None:
    await store.create_session("s", "cli")
    pending = [asyncio.ensure_future(store.append_message("s", "user", f"m{i}")) for i in range(50)]
    await asyncio.sleep(0)
    await store.close()
    ids = await asyncio.gather(*pending)
    assert len(set(ids)) == 50


async def test_the_writer_task_ends_once_idle_and_the_next_write_starts_another(store: Any) -> None:
    await store.create_session("s", "cli")
    write = asyncio.ensure_future(store.append_message("s", "user", "a"))
    await asyncio.sleep(0)
    task = store._actor._task
    assert task is not None
    await write
    await asyncio.sleep(0.01)
    assert store._actor._task is None and task.done()
    assert await store.append_message("s", "user", "b") > 0
