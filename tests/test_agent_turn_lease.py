"""The reference agent holds the conversation's turn lease for each turn (upstream's client protocol, §2.0).

Two agents on two stores stand for two workers sharing a database: their
turns never interleave, the one that waited continues from what the other
wrote, a lease that stays held fails the turn, and a lost lease stops it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_agent import AIAgent
from hermes_agent.providers import ProviderRequest, ScriptedProvider

from .raw_sql import fetch_rows, raw_exec, store_target


def other_store(store: Any) -> Any:
    return type(store)(store_target(store))


async def contents(store: Any, session_id: str) -> list[Any]:
    return [m["content"] for m in await store.get_messages(session_id)]


async def test_two_workers_take_turns_and_the_second_continues_from_the_first(store: Any) -> None:
    await store.create_session("conv", "api")
    worker = other_store(store)
    first_running, first_may_finish = asyncio.Event(), asyncio.Event()

    async def slow_answer(request: ProviderRequest) -> str:
        first_running.set()
        await first_may_finish.wait()
        return "answer one"

    seen: list[list[Any]] = []

    def record(request: ProviderRequest) -> str:
        seen.append([m.get("content") for m in request.messages if m.get("role") != "system"])
        return "answer two"

    notices: list[float] = []
    one = AIAgent(ScriptedProvider([slow_answer]), session_db=store, session_id="conv", tools=[])
    two = AIAgent(
        ScriptedProvider([record]), session_db=worker, session_id="conv", tools=[],
        on_turn_lease_wait=notices.append,
    )
    try:
        turn_one = asyncio.create_task(one.run_conversation("question one"))
        await first_running.wait()
        # Worker two's caller still holds an old copy of the conversation (empty here).
        turn_two = asyncio.create_task(two.run_conversation("question two", conversation_history=[]))
        for _ in range(600):  # waiting for the lease, and saying so (the first notice comes at once)
            if notices or turn_two.done():
                break
            await asyncio.sleep(0.05)
        assert not turn_two.done() and notices
        first_may_finish.set()
        result_one, result_two = await asyncio.gather(turn_one, turn_two)
    finally:
        await worker.close()
    assert result_one["completed"] and result_two["completed"]
    assert await contents(store, "conv") == ["question one", "answer one", "question two", "answer two"]
    # Having waited, worker two reloaded the transcript before asking the model.
    assert seen == [["question one", "answer one", "question two"]]
    assert await fetch_rows(store, "SELECT * FROM session_turn_leases") == []  # both released


async def test_a_fresh_session_runs_without_a_durable_lease(store: Any) -> None:
    agent = AIAgent(ScriptedProvider(["hi"]), session_db=store, session_id="brand-new", tools=[])
    result = await agent.run_conversation("hello")
    assert result["completed"]
    assert await store.get_session("brand-new") is not None
    assert await fetch_rows(store, "SELECT token FROM session_turn_leases") == []
    # The next turn has a row to lease.
    agent.provider.extend(["again"])  # type: ignore[attr-defined]
    assert (await agent.run_conversation("more"))["completed"]


async def test_a_lease_that_stays_held_fails_the_turn_and_writes_nothing(store: Any) -> None:
    await store.create_session("conv", "api")
    assert await store.try_acquire_session_turn_lease("conv", "another-worker", ttl_seconds=600)
    agent = AIAgent(ScriptedProvider(["never asked"]), session_db=store, session_id="conv", tools=[],
                    turn_lease_wait=0.3)
    result = await agent.run_conversation("hello")
    assert result["failed"] and not result["completed"]
    assert result["turn_exit_reason"] == "session_turn_lease_timeout"
    assert result["error"] == "session_turn_lease_timeout:conv"
    assert agent.provider.requests == []  # type: ignore[attr-defined]
    assert await contents(store, "conv") == []


async def test_an_interrupt_ends_the_wait(store: Any) -> None:
    await store.create_session("conv", "api")
    assert await store.try_acquire_session_turn_lease("conv", "another-worker", ttl_seconds=600)
    agent = AIAgent(ScriptedProvider(["never asked"]), session_db=store, session_id="conv", tools=[])
    turn = asyncio.create_task(agent.run_conversation("hello"))
    await asyncio.sleep(0.3)
    agent.interrupt()
    result = await asyncio.wait_for(turn, 10)
    assert result["interrupted"] and result["turn_exit_reason"] == "interrupted"
    assert await contents(store, "conv") == []


async def test_a_lost_lease_stops_the_turn_and_nothing_more_is_written(store: Any) -> None:
    await store.create_session("conv", "api")
    thinking = asyncio.Event()

    async def stuck(request: ProviderRequest) -> str:
        thinking.set()
        await asyncio.sleep(60)
        return "too late"

    agent = AIAgent(ScriptedProvider([stuck]), session_db=store, session_id="conv", tools=[],
                    turn_lease_ttl=5, turn_lease_refresh=0.1)
    turn = asyncio.create_task(agent.run_conversation("hello"))
    await asyncio.wait_for(thinking.wait(), 10)
    # Another worker takes the conversation over (its own holder and token).
    await raw_exec(store, "UPDATE session_turn_leases SET holder = 'thief', token = token + 1000")
    result = await asyncio.wait_for(turn, 10)
    assert result["interrupted"] and result["turn_exit_reason"] == "turn_lease_lost"
    assert "lost" in result["error"]
    assert await contents(store, "conv") == ["hello"]  # the user row was written under the lease; nothing after
    assert (await fetch_rows(store, "SELECT holder FROM session_turn_leases"))[0][0] == "thief"


@pytest.mark.parametrize("in_place", [True, False])
async def test_compaction_under_the_turn_lease(store: Any, in_place: bool) -> None:
    await store.create_session("conv", "api")
    agent = AIAgent(
        ScriptedProvider(["one", "two", "three"], summarizer="the summary"), session_db=store,
        session_id="conv", tools=[], compression_threshold_tokens=40, compression_in_place=in_place,
    )
    history: list[dict[str, Any]] = []
    for text in ("first question " * 10, "second question " * 10, "third question " * 10):
        result = await agent.run_conversation(text, conversation_history=history)
        assert result["completed"], result
        history = result["messages"]
    assert result["compressions"] >= 1
    tip = agent.session_id
    live = await contents(store, tip)
    assert live[-2:] == ["third question " * 10, "three"]
    assert await fetch_rows(store, "SELECT * FROM session_turn_leases") == []
