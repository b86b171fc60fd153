"""Session turn leases on both backends: upstream's contract (spec upstream-2026-08 §2.1-2.4, §3.1-3.2,
§7.1) and what this store does better (§8): fencing tokens, wake-ups, host-qualified liveness, cleanup.

Several stores on one database stand for several workers; the tests that need
real processes are in ``test_turn_lease_processes.py``.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

import pytest

from hermes_state import (
    CompressionSessionClosedError,
    SessionNotFoundError,
    SessionTurnAbortedError,
    SessionTurnLeaseLostError,
    SessionTurnTimeoutError,
)

from .raw_sql import fetch_rows, raw_exec, store_target


def other_store(store: Any) -> Any:
    """Another worker on the same database."""
    return type(store)(store_target(store))


async def lease_row(store: Any, conversation_id: str) -> tuple[Any, ...] | None:
    rows = await fetch_rows(
        store,
        "SELECT holder, token, acquired_at, expires_at, holder_host, holder_pid FROM session_turn_leases "
        "WHERE conversation_id = ?",
        (conversation_id,),
    )
    return rows[0] if rows else None


async def expire(store: Any, conversation_id: str, ago: float = 1.0) -> None:
    await raw_exec(
        store, "UPDATE session_turn_leases SET expires_at = ? WHERE conversation_id = ?", (time.time() - ago, conversation_id)
    )


async def contents(store: Any, session_id: str) -> list[Any]:
    return [m["content"] for m in await store.get_messages(session_id)]


# ------------------------------------------------------------ upstream's contract


async def test_acquire_refresh_and_release(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "holder-a") is True
    assert await store.try_acquire_session_turn_lease("s", "holder-b") is False
    assert await store.refresh_session_turn_lease("s", "holder-b") is False
    assert await store.refresh_session_turn_lease("s", "holder-a") is True
    await store.release_session_turn_lease("s", "holder-b")  # not the holder: nothing happens
    assert await store.try_acquire_session_turn_lease("s", "holder-b") is False
    await store.release_session_turn_lease("s", "holder-a")
    assert await store.try_acquire_session_turn_lease("s", "holder-b") is True
    await store.release_session_turn_lease("s", "holder-b")
    await store.release_session_turn_lease("s", "holder-b")  # idempotent


async def test_empty_arguments_answer_false_and_bad_ones_raise(store: Any) -> None:
    await store.create_session("s", "cli")
    for session_id, holder in (("", "h"), ("s", ""), (None, "h"), ("s", None)):
        assert await store.try_acquire_session_turn_lease(session_id, holder) is False
        assert await store.acquire_session_turn_lease(session_id, holder, wait_seconds=0) is False
        assert await store.refresh_session_turn_lease(session_id, holder) is False
        assert await store.release_session_turn_lease(session_id, holder) is None
    with pytest.raises(TypeError, match="holder must be a str"):
        await store.try_acquire_session_turn_lease("s", 7)
    with pytest.raises(TypeError, match="session_id must be a str"):
        await store.refresh_session_turn_lease(b"s", "h")
    with pytest.raises(ValueError, match="at most 1024 characters"):
        await store.try_acquire_session_turn_lease("s", "h" * 1025)
    assert await store.try_acquire_session_turn_lease("s", "h" * 1024)
    await store.release_session_turn_lease("s", "h" * 1024)
    for ttl in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="ttl_seconds"):
            await store.try_acquire_session_turn_lease("s", "h", ttl_seconds=ttl)
    with pytest.raises(TypeError, match="ttl_seconds"):
        await store.refresh_session_turn_lease("s", "h", ttl_seconds="60")
    with pytest.raises(TypeError, match="on_wait"):
        await store.acquire_session_turn_lease("s", "h", on_wait="call me")
    with pytest.raises(TypeError, match="turn_lease_holder"):
        await store.append_message("s", "user", "x", turn_lease_holder=3)
    with pytest.raises(ValueError, match="turn_lease_ttl_seconds"):
        await store.append_message("s", "user", "x", turn_lease_holder="h", turn_lease_ttl_seconds=math.nan)
    assert await fetch_rows(store, "SELECT * FROM session_turn_leases") == []
    assert await contents(store, "s") == []


async def test_a_zero_ttl_is_a_tenth_of_a_second_and_reacquire_does_not_extend(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a", ttl_seconds=0)
    holder, token, acquired_at, expires_at, *_ = await lease_row(store, "s")
    assert expires_at - acquired_at == pytest.approx(0.1)
    await asyncio.sleep(0.15)
    assert await store.try_acquire_session_turn_lease("s", "b", ttl_seconds=600)  # expired: taken over
    holder, token, acquired_at, expires_at, *_ = await lease_row(store, "s")
    assert await store.try_acquire_session_turn_lease("s", "b", ttl_seconds=5)  # re-entrant: True ...
    assert (await lease_row(store, "s"))[:4] == (holder, token, acquired_at, expires_at)  # ... and nothing moved


async def test_the_lease_covers_the_whole_conversation(store: Any) -> None:
    await store.create_session("root", "cli")
    await store.end_session("root", "compression")
    await store.create_session("child", "cli", parent_session_id="root")
    await store.create_session("fork", "cli", parent_session_id="root", model_config={"_branched_from": "root"})
    assert await store.try_acquire_session_turn_lease("child", "holder-a")
    assert not await store.try_acquire_session_turn_lease("root", "holder-b")
    assert await store.try_acquire_session_turn_lease("fork", "holder-b")  # a fork is its own conversation
    await store.release_session_turn_lease("root", "holder-a")  # any segment's id releases it
    assert await store.try_acquire_session_turn_lease("child", "holder-b")
    # A session id with no row yet keys itself.
    assert await store.try_acquire_session_turn_lease("not-created-yet", "holder-c")
    assert (await lease_row(store, "not-created-yet"))[0] == "holder-c"


async def test_waiting_is_cancellable(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a")
    waiter = asyncio.create_task(store.acquire_session_turn_lease("s", "b", wait_seconds=30, poll_interval_seconds=0.05))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (await lease_row(store, "s"))[0] == "a"


async def test_abort_is_asked_first_and_ends_a_wait_at_once(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.acquire_session_turn_lease("s", "a", should_abort=lambda: True) is False  # free, yet aborted
    assert await lease_row(store, "s") is None
    assert await store.try_acquire_session_turn_lease("s", "a")
    flag = {"stop": False}
    waiter = asyncio.create_task(
        store.acquire_session_turn_lease("s", "b", wait_seconds=60, poll_interval_seconds=30, should_abort=lambda: flag["stop"])
    )
    await asyncio.sleep(0.3)
    flag["stop"] = True
    started = time.monotonic()
    assert await asyncio.wait_for(waiter, 5) is False
    assert time.monotonic() - started < 1.0  # not after the next 30 s poll

    def broken() -> bool:
        raise RuntimeError("callback bug")

    # A raising callback counts as "do not abort".
    assert await store.acquire_session_turn_lease("s", "b", wait_seconds=0.2, should_abort=broken) is False


async def test_on_wait_cadence(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a")
    calls: list[float] = []
    assert not await store.acquire_session_turn_lease("s", "b", wait_seconds=0, on_wait=calls.append)
    assert calls == []  # one attempt, no notice
    assert not await store.acquire_session_turn_lease(
        "s", "b", wait_seconds=1.0, poll_interval_seconds=0.05, wait_notice_interval_seconds=0.3, on_wait=calls.append
    )
    assert 3 <= len(calls) <= 4 and calls[0] < 0.2
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert all(0.28 <= gap < 0.45 for gap in gaps), gaps
    seen: list[float] = []

    async def coroutine_notice(elapsed: float) -> None:
        seen.append(elapsed)
        raise RuntimeError("ignored")

    assert not await store.acquire_session_turn_lease(
        "s", "b", wait_seconds=0.3, poll_interval_seconds=0.05, wait_notice_interval_seconds=0, on_wait=coroutine_notice
    )
    assert len(seen) >= 3  # every poll when the interval is <= 0; awaited; its error ignored


async def test_a_release_wakes_a_waiter_at_once(store: Any) -> None:
    await store.create_session("s", "cli")
    worker = other_store(store)
    try:
        await worker.get_session("s")  # opened first: the timing below is the wake-up, not the open
        assert await store.try_acquire_session_turn_lease("s", "a")
        waiter = asyncio.create_task(
            worker.acquire_session_turn_lease("s", "b", wait_seconds=30, poll_interval_seconds=20)
        )
        await asyncio.sleep(0.5)
        released = time.monotonic()
        await store.release_session_turn_lease("s", "a")
        assert await asyncio.wait_for(waiter, 10)
        assert time.monotonic() - released < 5.0  # far below the 20 s poll (bench/turn_leases.py times it)
        assert (await lease_row(store, "s"))[0] == "b"
    finally:
        await worker.close()


# ----------------------------------------------------------------- the fence


async def test_fenced_appends(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a")
    await store.append_message("s", "user", "by a", turn_lease_holder="a")
    with pytest.raises(SessionTurnLeaseLostError, match="refusing transcript write for 's'"):
        await store.append_message("s", "user", "by b", turn_lease_holder="b")
    with pytest.raises(SessionTurnLeaseLostError):
        await store.append_messages_batch("s", [{"role": "user", "content": "batch by b"}], None, "b")
    await store.append_message("s", "user", "unfenced")  # the fence is opt-in per call
    await store.append_message("s", "user", "empty holder", turn_lease_holder="")
    assert await contents(store, "s") == ["by a", "unfenced", "empty holder"]
    # Wrong holder on a closed session: the lease is judged first (upstream's order).
    await store.end_session("s", "compression")
    with pytest.raises(SessionTurnLeaseLostError):
        await store.append_message("s", "user", "x", turn_lease_holder="b")
    with pytest.raises(CompressionSessionClosedError):
        await store.append_message("s", "user", "x", turn_lease_holder="a")
    with pytest.raises(SessionNotFoundError):
        await store.append_message("missing", "user", "x")


async def test_one_batch_judges_every_fenced_append_alone(store: Any) -> None:
    """Appends the writer takes as one batch (one admission query for the set) get each its own verdict."""
    await store.create_session("root", "cli")
    await store.end_session("root", "compression")
    await store.create_session("child", "cli", parent_session_id="root")  # conversation "root"
    await store.create_session("open", "cli")
    await store.create_session("closed", "cli")
    assert await store.try_acquire_session_turn_lease("child", "a", ttl_seconds=60)
    assert await store.try_acquire_session_turn_lease("closed", "c")
    assert await store.try_acquire_session_turn_lease("ghost", "g")  # no session row: keyed by its id
    await store.end_session("closed", "compression")
    await expire(store, "root")  # expired, nobody took it: the first admitted append renews it
    writes = {
        "child by a": store.append_message("child", "user", "child by a", turn_lease_holder="a", turn_lease_ttl_seconds=30),
        "root by a": store.append_message("root", "user", "root by a", turn_lease_holder="a"),
        "child by b": store.append_message("child", "user", "child by b", turn_lease_holder="b"),
        "open by x": store.append_message("open", "user", "open by x", turn_lease_holder="x"),
        "open plain": store.append_message("open", "user", "open plain"),
        "ghost by g": store.append_message("ghost", "user", "ghost by g", turn_lease_holder="g"),
        "ghost by h": store.append_message("ghost", "user", "ghost by h", turn_lease_holder="h"),
        "closed by c": store.append_message("closed", "user", "closed by c", turn_lease_holder="c"),
        "closed by d": store.append_message("closed", "user", "closed by d", turn_lease_holder="d"),
    }
    before, began = await store.writer_stats(), time.time()
    outcomes = dict(zip(writes, await asyncio.gather(*writes.values(), return_exceptions=True)))
    after = await store.writer_stats()
    assert after["batches_applied"] - before["batches_applied"] == 1  # the bulk path, not one by one
    kinds = {name: type(outcome).__name__ if isinstance(outcome, BaseException) else "ok" for name, outcome in outcomes.items()}
    assert kinds == {
        "child by a": "ok",
        "root by a": "CompressionSessionClosedError",  # admitted by the lease, refused by the closed segment
        "child by b": "SessionTurnLeaseLostError",
        "open by x": "SessionTurnLeaseLostError",
        "open plain": "ok",
        "ghost by g": "SessionNotFoundError",
        "ghost by h": "SessionTurnLeaseLostError",  # the lease is judged first
        "closed by c": "CompressionSessionClosedError",
        "closed by d": "SessionTurnLeaseLostError",
    }
    assert await contents(store, "child") == ["child by a"]
    assert await contents(store, "open") == ["open plain"]
    _, _, _, expires_at, *_ = await lease_row(store, "root")
    assert began + 29 <= expires_at <= time.time() + 31  # renewed once, by the first admitted fence's TTL


async def test_an_expired_lease_nobody_took_is_renewed_by_its_holder(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a", ttl_seconds=60)
    await expire(store, "s")
    before = time.time()
    await store.append_message("s", "user", "late but still mine", turn_lease_holder="a", turn_lease_ttl_seconds=30)
    _, _, _, expires_at, *_ = await lease_row(store, "s")
    assert before + 29 <= expires_at <= time.time() + 31
    assert await store.refresh_session_turn_lease("s", "a")  # refresh revives too


async def test_after_a_takeover_the_stale_holder_writes_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a", ttl_seconds=0.05)
    await asyncio.sleep(0.1)
    assert await store.try_acquire_session_turn_lease("s", "b")
    with pytest.raises(SessionTurnLeaseLostError, match="lease lost"):
        await store.append_message("s", "user", "stale", turn_lease_holder="a")
    await store.append_message("s", "user", "current", turn_lease_holder="b")
    assert await contents(store, "s") == ["current"]
    assert not await store.refresh_session_turn_lease("s", "a")


async def test_every_transcript_write_can_be_fenced(store: Any) -> None:
    await store.create_session("s", "cli")
    first = await store.append_message("s", "user", "question")
    await store.append_message("s", "assistant", "answer")
    assert await store.try_acquire_session_turn_lease("s", "a")
    summary = [{"role": "user", "content": "summary"}]
    refused = {
        "replace_messages": lambda h: store.replace_messages("s", summary, turn_lease_holder=h),
        "rewind_to_message": lambda h: store.rewind_to_message("s", first, turn_lease_holder=h),
        "archive_and_compact": lambda h: store.archive_and_compact("s", summary, turn_lease_holder=h),
        "pop_message": lambda h: store.pop_message("s", turn_lease_holder=h),
        "publish_compression_child": lambda h: store.publish_compression_child(
            parent_session_id="s", child_session_id="c", source="cli", messages=summary,
            require_compression_lease=False, turn_lease_holder=h,
        ),
    }
    for name, call in refused.items():
        with pytest.raises(SessionTurnLeaseLostError):
            await call("b")
        assert await contents(store, "s") == ["question", "answer"], name
    assert await store.get_session("c") is None
    assert await store.pop_message("s", turn_lease_holder="a") is not None
    assert (await store.rewind_to_message("s", first, turn_lease_holder="a"))["rewound_count"] == 1
    assert await store.archive_and_compact("s", summary, turn_lease_holder="a") == 1
    await store.replace_messages("s", summary, turn_lease_holder="a")
    await store.publish_compression_child(
        parent_session_id="s", child_session_id="c", source="cli", messages=summary,
        require_compression_lease=False, turn_lease_holder="a",
    )
    # The child continues the conversation, so the same lease covers it.
    await store.append_message("c", "user", "in the child", turn_lease_holder="a")
    assert await contents(store, "c") == ["summary", "in the child"]


async def test_a_chunked_batch_whose_lease_is_lost_commits_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    rows = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    with pytest.raises(SessionTurnLeaseLostError):
        await store.append_messages_batch("s", rows, None, "nobody", 3)
    assert await contents(store, "s") == []
    assert await store.try_acquire_session_turn_lease("s", "a")
    assert await store.append_messages_batch("s", rows, chunk_rows=3, turn_lease_holder="a") == 10
    assert await store.append_messages_batch("s", rows[:2], None, None, 1) == 2  # unfenced chunks as before
    assert len(await contents(store, "s")) == 12


async def test_positional_order_of_append_messages_batch_is_upstreams(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "holder")
    # (session_id, messages, compression_lock_holder, turn_lease_holder, chunk_rows, turn_lease_ttl_seconds)
    assert await store.append_messages_batch("s", [{"role": "user", "content": "x"}], None, "holder", 1, 60.0) == 1
    with pytest.raises(SessionTurnLeaseLostError):
        await store.append_messages_batch("s", [{"role": "user", "content": "y"}], None, "other")


# ------------------------------------------------------------ fencing tokens


async def test_tokens_grow_with_every_acquisition(store: Any) -> None:
    await store.create_session("s", "cli")
    await store.create_session("t", "cli")
    seen = []
    for session_id in ("s", "t", "s", "s"):
        assert await store.try_acquire_session_turn_lease(session_id, "a")
        seen.append((await lease_row(store, session_id))[1])
        await store.release_session_turn_lease(session_id, "a")
    assert seen == sorted(seen) and len(set(seen)) == 4


async def test_session_turn_holds_fences_and_releases(store: Any) -> None:
    await store.create_session("s", "cli")
    async with store.session_turn("s", "worker-1", ttl_seconds=30) as turn:
        assert turn.token is not None and turn.conversation_id == "s" and turn.waited == 0
        assert (await lease_row(store, "s"))[:2] == ("worker-1", turn.token)
        await turn.append_message("s", "user", "hello")
        await turn.append_messages_batch("s", [{"role": "assistant", "content": "hi"}], chunk_rows=1)
        await store.append_message("s", "user", "plain write, not fenced")
        first_token = turn.token
    assert await lease_row(store, "s") is None
    assert await contents(store, "s") == ["hello", "hi", "plain write, not fenced"]
    async with store.session_turn("s", "worker-1") as again:
        assert again.token > first_token


async def test_a_stale_turn_of_the_same_holder_is_fenced_by_its_token(store: Any) -> None:
    """Two turns with one holder string (a reused task id, §8.1): only the newest token writes."""
    await store.create_session("s", "cli")
    turn = store.session_turn("s", "reused-holder", ttl_seconds=30)
    await turn.__aenter__()
    await expire(store, "s")
    successor = store.session_turn("s", "reused-holder", ttl_seconds=30)
    async with successor:
        assert successor.token > turn.token
        with pytest.raises(SessionTurnLeaseLostError):
            await turn.append_message("s", "user", "stale")
        assert turn.lost
        with pytest.raises(SessionTurnLeaseLostError):  # no I/O once known lost
            await turn.append_message("s", "user", "stale again")
        await successor.append_message("s", "user", "current")
    await turn.__aexit__(None, None, None)  # releasing a lost turn leaves others alone
    assert await contents(store, "s") == ["current"]


async def test_session_turn_waits_times_out_aborts_and_refuses_unknown_sessions(store: Any) -> None:
    await store.create_session("s", "cli")
    with pytest.raises(ValueError, match="does not exist"):
        async with store.session_turn("missing", "w"):
            pass
    with pytest.raises(ValueError, match="holder"):
        store.session_turn("s", "")
    with pytest.raises(TypeError):
        store.session_turn("s", 5)
    assert await store.try_acquire_session_turn_lease("s", "other")
    with pytest.raises(SessionTurnTimeoutError, match="session_turn_lease_timeout:s"):
        async with store.session_turn("s", "w", wait_seconds=0.2, poll_interval_seconds=0.05):
            pass
    with pytest.raises(SessionTurnAbortedError):
        async with store.session_turn("s", "w", should_abort=lambda: True):
            pass

    async def release_soon() -> None:
        await asyncio.sleep(0.3)
        await store.release_session_turn_lease("s", "other")

    releaser = asyncio.create_task(release_soon())
    async with store.session_turn("s", "w", wait_seconds=30, poll_interval_seconds=20) as turn:
        assert 0.2 < turn.waited < 10.0  # woken by the release, not the 20 s poll
    await releaser


async def test_session_turn_releases_on_error_and_on_cancellation(store: Any) -> None:
    await store.create_session("s", "cli")
    with pytest.raises(RuntimeError, match="boom"):
        async with store.session_turn("s", "w"):
            raise RuntimeError("boom")
    assert await lease_row(store, "s") is None
    entered = asyncio.Event()

    async def turn_body() -> None:
        async with store.session_turn("s", "w"):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(turn_body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await lease_row(store, "s") is None


async def test_session_turn_keeps_its_lease_fresh_and_notices_a_loss(store: Any) -> None:
    await store.create_session("s", "cli")
    async with store.session_turn("s", "w", ttl_seconds=0.6, refresh_interval_seconds=0.1) as turn:
        await asyncio.sleep(1.5)  # well past the TTL: the background refresh kept it
        assert not await store.try_acquire_session_turn_lease("s", "rival")
        await turn.append_message("s", "user", "still mine")
        # Somebody takes the lease (here by hand: a new token); the next refresh notices.
        await raw_exec(store, "UPDATE session_turn_leases SET holder = 'rival', token = token + 1000")
        await asyncio.wait_for(turn.wait_lost(), 5)
        assert turn.lost
        with pytest.raises(SessionTurnLeaseLostError):
            turn.check()
    assert (await lease_row(store, "s"))[0] == "rival"  # the lost turn's exit left the rival's lease alone
    assert await contents(store, "s") == ["still mine"]


async def test_the_same_holder_from_another_process_is_somebody_else(store: Any) -> None:
    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "pid=1:turn=t")
    from hermes_state.lease_host import process_started

    # As if process 1 (alive, same host) had taken it.
    started = await asyncio.to_thread(process_started, 1)
    await raw_exec(store, "UPDATE session_turn_leases SET holder_pid = 1, holder_started = ?", (started,))
    assert not await store.try_acquire_session_turn_lease("s", "pid=1:turn=t")


async def test_a_dead_local_holder_is_taken_over_and_a_pid_in_the_holder_string_means_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    # Upstream took this over at once by parsing "pid=999999"; here the holder string proves nothing.
    assert await store.try_acquire_session_turn_lease("s", "pid=999999:turn=t", ttl_seconds=600)
    assert not await store.try_acquire_session_turn_lease("s", "successor")
    # The recorded process (this host, a pid that no longer runs): taken over before the TTL.
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    await raw_exec(store, "UPDATE session_turn_leases SET holder_pid = ?, holder_started = 1", (gone.pid,))
    assert await store.try_acquire_session_turn_lease("s", "successor")
    # The same dead pid recorded by another host (or PID namespace): only the TTL ends it.
    await store.release_session_turn_lease("s", "successor")
    assert await store.try_acquire_session_turn_lease("s", "remote", ttl_seconds=600)
    await raw_exec(
        store, "UPDATE session_turn_leases SET holder_host = 'another-boot:1:1', holder_pid = ?", (gone.pid,)
    )
    assert not await store.try_acquire_session_turn_lease("s", "successor")


# ----------------------------------------------------------------- cleanup


async def test_deleting_a_conversation_removes_its_lease(store: Any) -> None:
    await store.create_session("solo", "cli")
    assert await store.try_acquire_session_turn_lease("solo", "a")
    assert await store.delete_session("solo")
    assert await lease_row(store, "solo") is None
    # A conversation whose tip survives its root keeps its lease.
    await store.create_session("root", "cli")
    await store.publish_compression_child(
        parent_session_id="root", child_session_id="tip", source="cli",
        messages=[{"role": "user", "content": "summary"}], require_compression_lease=False,
    )
    assert await store.try_acquire_session_turn_lease("tip", "a")
    assert await store.delete_session("root")
    assert (await lease_row(store, "root"))[0] == "a"
    await store.append_message("tip", "user", "still fenced by the same lease", turn_lease_holder="a")
    assert await store.delete_session("tip")
    assert await lease_row(store, "root") is None


async def test_pruning_removes_leases_and_old_expired_rows_are_swept(store: Any) -> None:
    await store.create_session("old", "cli")
    await store.end_session("old", "done")
    assert await store.try_acquire_session_turn_lease("old", "a")
    await raw_exec(store, "UPDATE sessions SET started_at = 0, ended_at = 1")
    assert await store.prune_sessions(older_than_days=30) == 1
    assert await lease_row(store, "old") is None
    for sid in ("x", "y"):
        assert await store.try_acquire_session_turn_lease(sid, "a")
    await expire(store, "x", ago=2 * 3600)  # long expired and never renewed
    await expire(store, "y", ago=60)  # recently expired: its holder may still renew it
    assert await store.try_acquire_session_turn_lease("z", "a")
    assert await lease_row(store, "x") is None
    assert (await lease_row(store, "y"))[0] == "a"
    assert await store.refresh_session_turn_lease("y", "a")


async def test_process_identity_is_recorded_with_the_lease(store: Any) -> None:
    from hermes_state.lease_host import LOCAL_HOST

    await store.create_session("s", "cli")
    assert await store.try_acquire_session_turn_lease("s", "a")
    row = await lease_row(store, "s")
    assert row[4:] == (LOCAL_HOST, os.getpid())


async def test_turn_leases_lists_every_row_with_its_liveness(store: Any) -> None:
    from hermes_state.lease_host import LOCAL_HOST

    assert await store.turn_leases() == []
    await store.create_session("a", "cli")
    assert await store.try_acquire_session_turn_lease("a", "worker-a", ttl_seconds=60)
    assert await store.try_acquire_session_turn_lease("b", "worker-b", ttl_seconds=60)
    await expire(store, "b")
    rows = await store.turn_leases()
    assert [(r["conversation_id"], r["holder"], r["live"]) for r in rows] == [("a", "worker-a", True), ("b", "worker-b", False)]
    assert rows[0]["holder_host"] == LOCAL_HOST and rows[0]["holder_pid"] == os.getpid()
    assert rows[0]["token"] < rows[1]["token"]
