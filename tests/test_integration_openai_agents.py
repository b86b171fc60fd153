"""``HermesSession`` against the OpenAI Agents SDK ``Session`` contract, on real stores."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermes_state import CompressionSessionClosedError, SessionDB, StoreClosedError

from .adapter_support import SDK_ITEMS, reopen

# The SDK takes seconds to import (it builds the pydantic models of every MCP type), and every
# xdist worker collects every module: the SDK is imported when this module's first test runs,
# on the one worker that runs them all, not at collection. The names below are bound then.
pytestmark = pytest.mark.xdist_group("openai_agents")
Agent: Any = None
RunConfig: Any = None
Runner: Any = None
Session: Any = None
SessionSettings: Any = None
HermesSession: Any = None
ResponseFunctionToolCall: Any = None
ResponseOutputMessage: Any = None
ResponseOutputText: Any = None
ResponseReasoningItem: Any = None
Summary: Any = None
ScriptedModel: Any = None
get_weather: Any = None


@pytest.fixture(autouse=True, scope="module")
def _sdk() -> None:
    from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
    from agents.memory import Session, SessionSettings
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseReasoningItem,
    )
    from openai.types.responses.response_reasoning_item import Summary

    from hermes_state.integrations.openai_agents import HermesSession

    class ScriptedModel(Model):
        """A ``Model`` that replays scripted turns and records the input it was given."""

        def __init__(self, turns: list[list[Any]]) -> None:
            self.turns = list(turns)
            self.inputs: list[Any] = []

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, *, previous_response_id, conversation_id, prompt) -> Any:  # type: ignore[no-untyped-def]
            self.inputs.append(copy.deepcopy(input))
            return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            raise NotImplementedError("ScriptedModel only answers Runner.run")

    @function_tool
    def get_weather(city: str) -> str:
        """Report the weather for a city."""
        return f"{city}: 18 C, light breeze"

    globals().update(
        Agent=Agent, RunConfig=RunConfig, Runner=Runner, Session=Session, SessionSettings=SessionSettings,
        HermesSession=HermesSession, ResponseFunctionToolCall=ResponseFunctionToolCall,
        ResponseOutputMessage=ResponseOutputMessage, ResponseOutputText=ResponseOutputText,
        ResponseReasoningItem=ResponseReasoningItem, Summary=Summary, ScriptedModel=ScriptedModel,
        get_weather=get_weather,
    )

def items() -> list[dict[str, Any]]:
    return copy.deepcopy(SDK_ITEMS)


# ------------------------------------------------------------------ the contract


async def test_implements_the_session_protocol(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    assert isinstance(session, Session)
    assert session.session_id == "chat"
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_every_item_type_round_trips_exactly_in_order(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items(items())
    got = await session.get_items()
    assert got == SDK_ITEMS
    # Exact also means the same JSON (types, key order, nulls, floats).
    assert json.dumps(got) == json.dumps(SDK_ITEMS)


async def test_items_added_one_by_one_keep_their_order(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    for item in items():
        await session.add_items([item])
    assert await session.get_items() == SDK_ITEMS


async def test_limit_returns_the_latest_items_oldest_first(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items(items())
    assert await session.get_items(limit=3) == SDK_ITEMS[-3:]
    assert await session.get_items(limit=1) == SDK_ITEMS[-1:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=1000) == SDK_ITEMS
    limited = HermesSession("chat", store, session_settings=SessionSettings(limit=2))
    assert await limited.get_items() == SDK_ITEMS[-2:]
    assert await limited.get_items(limit=4) == SDK_ITEMS[-4:]
    assert await HermesSession("chat", store, session_settings={"limit": 5}).get_items() == SDK_ITEMS[-5:]
    with pytest.raises(TypeError, match="limitt"):
        HermesSession("chat", store, session_settings={"limitt": 5})


async def test_pop_removes_exactly_the_latest(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items(items())
    assert await session.pop_item() == SDK_ITEMS[-1]
    assert await session.pop_item() == SDK_ITEMS[-2]
    assert await session.get_items() == SDK_ITEMS[:-2]
    assert await session.get_items(limit=1) == [SDK_ITEMS[-3]]


async def test_concurrent_pops_remove_distinct_latest_items(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    numbered = [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    await session.add_items(numbered)
    popped = await asyncio.gather(*(session.pop_item() for _ in range(12)))
    assert sorted(p["content"] for p in popped if p) == sorted(f"turn {i}" for i in range(18, 30))
    assert await session.get_items() == numbered[:18]


async def test_pop_after_add_in_flight_removes_the_new_item(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items([{"role": "user", "content": "first"}])
    add = asyncio.ensure_future(session.add_items([{"role": "assistant", "content": "second"}]))
    pop = asyncio.ensure_future(session.pop_item())
    await add
    assert await pop == {"role": "assistant", "content": "second"}
    assert await session.get_items() == [{"role": "user", "content": "first"}]


async def test_clear_empties_only_this_session(store: SessionDB) -> None:
    a, b = HermesSession("a", store), HermesSession("b", store)
    await a.add_items(items())
    await b.add_items([{"role": "user", "content": "other"}])
    await a.clear_session()
    assert await a.get_items() == []
    assert await a.pop_item() is None
    assert await b.get_items() == [{"role": "user", "content": "other"}]
    await a.add_items([{"role": "user", "content": "again"}])
    assert await a.get_items() == [{"role": "user", "content": "again"}]
    await HermesSession("never-used", store).clear_session()


async def test_sessions_are_isolated(store: SessionDB) -> None:
    a, b = HermesSession("a", store), HermesSession("b", store)
    await a.add_items([{"role": "user", "content": "for a"}])
    await b.add_items([{"role": "user", "content": "for b"}])
    assert await a.pop_item() == {"role": "user", "content": "for a"}
    assert await b.get_items() == [{"role": "user", "content": "for b"}]
    # Two adapters on one id see one conversation.
    assert await HermesSession("b", store).get_items() == [{"role": "user", "content": "for b"}]


async def test_fifty_concurrent_sessions_share_one_store(store: SessionDB) -> None:
    async def converse(n: int) -> None:
        session = HermesSession(f"agent-{n}", store)
        for turn in range(20):
            await session.add_items([{"role": "user", "content": f"agent {n} turn {turn}"}])
            if turn % 5 == 4:
                await session.pop_item()

    batches_before = store._actor.batches
    await asyncio.gather(*(converse(n) for n in range(50)))
    # 1,250 writes (sessions, appends, pops) from 50 sessions went through the one writer in shared commits.
    assert store._actor.batches - batches_before < 1250 / 5
    for n in range(50):
        got = await HermesSession(f"agent-{n}", store).get_items()
        assert [i["content"] for i in got] == [f"agent {n} turn {t}" for t in range(20) if t % 5 != 4]


async def test_a_session_deleted_behind_the_adapter_is_started_again(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items([{"role": "user", "content": "before"}])
    assert await store.delete_session("chat")
    await session.add_items([{"role": "user", "content": "after"}])
    assert await session.get_items() == [{"role": "user", "content": "after"}]
    row = await store.get_session("chat")
    assert row is not None and row["source"] == "openai-agents"


async def test_a_store_reopened_from_disk_has_every_item(store: SessionDB) -> None:
    await HermesSession("chat", store).add_items(items())
    await store.close()
    again = reopen(store)
    try:
        session = HermesSession("chat", again)
        assert await session.get_items() == SDK_ITEMS
        assert await session.pop_item() == SDK_ITEMS[-1]
    finally:
        await again.close()


@pytest.mark.backends("sqlite")  # search_messages is not on PostgreSQL yet (issue 11 phase 2)
async def test_transcript_is_searchable(store: SessionDB) -> None:
    await HermesSession("chat", store).add_items(items())
    hits = await store.search_messages("sunny")
    assert [(h["session_id"], h["role"]) for h in hits] == [("chat", "tool")]
    hits = await store.search_messages("get_weather")
    assert hits and hits[0]["role"] == "assistant"
    assert (await store.search_messages("Wetter"))[0]["role"] == "user"
    assert (await store.search_messages("weather tool"))[0]["role"] == "assistant"  # reasoning summary
    session = await store.get_session("chat")
    assert session is not None and session["source"] == "openai-agents"
    assert session["message_count"] == len(SDK_ITEMS) and session["tool_call_count"] == 2


async def test_rows_from_other_writers_read_back_as_messages(store: SessionDB) -> None:
    session = HermesSession("shared", store)
    await session.add_items([{"role": "user", "content": "from the sdk"}])
    await store.append_message("shared", "assistant", "from a hermes agent")
    await store.append_message("shared", "tool", "42", tool_call_id="call_9")
    assert await session.get_items() == [
        {"role": "user", "content": "from the sdk"},
        {"role": "assistant", "content": "from a hermes agent"},
        {"type": "function_call_output", "call_id": "call_9", "output": "42"},
    ]


async def test_bad_input_fails_at_the_call_site_and_stores_nothing(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items([{"role": "user", "content": "kept"}])
    with pytest.raises(TypeError, match="items must be a list"):
        await session.add_items({"role": "user", "content": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"items\[1\]"):
        await session.add_items([{"role": "user", "content": "x"}, "not an item"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"items\[0\].*JSON"):
        await session.add_items([{"role": "user", "content": object()}])
    with pytest.raises(ValueError, match="limit"):
        await session.get_items(limit=-1)
    with pytest.raises(TypeError, match="session_db"):
        HermesSession("chat", "state.db")
    with pytest.raises(ValueError, match="session_id"):
        HermesSession("", store)
    assert await session.get_items() == [{"role": "user", "content": "kept"}]
    await session.add_items([])


async def test_a_session_closed_by_compression_refuses_writes(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items([{"role": "user", "content": "kept"}])
    await store.end_session("chat", "compression")
    with pytest.raises(CompressionSessionClosedError):
        await session.add_items([{"role": "user", "content": "late"}])
    with pytest.raises(CompressionSessionClosedError):
        await session.pop_item()
    assert await session.get_items() == [{"role": "user", "content": "kept"}]


async def test_the_store_is_borrowed(store: SessionDB) -> None:
    session = HermesSession("chat", store)
    await session.add_items([{"role": "user", "content": "x"}])
    del session
    assert not store.closed
    assert await store.message_count("chat") == 1


async def test_a_closed_store_refuses_even_an_empty_add(db_path) -> None:  # type: ignore[no-untyped-def]
    """The SDK's contract: ``add_items([])`` must not skip the closed check (its SQLiteSession raises too)."""
    db = SessionDB(db_path)
    session = HermesSession("chat", db)
    await session.add_items([])  # open: nothing to do, no error
    await db.close()
    with pytest.raises(StoreClosedError):
        await session.add_items([])
    with pytest.raises(StoreClosedError):
        await session.add_items([{"role": "user", "content": "x"}])


# ------------------------------------------------------- Runner.run with a model stub


def say(text: str, ident: str) -> Any:
    return ResponseOutputMessage(
        id=ident, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(name: str, arguments: str, call_id: str) -> Any:
    return ResponseFunctionToolCall(type="function_call", name=name, arguments=arguments, call_id=call_id, id=f"fc_{call_id}")


async def run_trip(store: SessionDB) -> tuple[Any, list[Any], Any]:
    """Two ``Runner.run`` calls on one session: a reasoning + tool turn with a handoff, then a follow-up."""
    reasoning = ResponseReasoningItem(id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="check forecast")])
    french_model = ScriptedModel([
        [say("Il fait 18 degrés à Paris.", "msg_fr")],
        [say("De rien !", "msg_fr2")],
    ])
    french = Agent(name="french_agent", instructions="Réponds en français.", model=french_model)
    triage_model = ScriptedModel([
        [reasoning, call("get_weather", '{"city": "Paris"}', "call_1")],
        [call("transfer_to_french_agent", "{}", "call_2")],
    ])
    triage = Agent(name="triage", instructions="Route.", model=triage_model, tools=[get_weather], handoffs=[french])
    session = HermesSession("trip", store)
    config = RunConfig(tracing_disabled=True)

    first = await Runner.run(triage, "Weather in Paris?", session=session, run_config=config)
    assert first.final_output == "Il fait 18 degrés à Paris."
    stored = await session.get_items()
    second = await Runner.run(french, "Merci", session=session, run_config=config)
    assert second.final_output == "De rien !"
    return session, stored, french_model


async def test_runner_run_keeps_the_conversation_in_the_store(store: SessionDB) -> None:
    session, stored, french_model = await run_trip(store)
    kinds = [item.get("type", "message") for item in stored]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "function_call",
                     "function_call_output", "message"]
    assert stored[0] == {"content": "Weather in Paris?", "role": "user"}
    assert stored[3]["output"] == "Paris: 18 C, light breeze"
    assert stored[4]["name"] == "transfer_to_french_agent"
    # The second run started from the stored history, item for item.
    assert french_model.inputs[-1] == stored + [{"content": "Merci", "role": "user"}]
    assert len(await session.get_items()) == len(stored) + 2


@pytest.mark.backends("sqlite")  # search_messages is not on PostgreSQL yet (issue 11 phase 2)
async def test_runner_transcript_is_searchable(store: SessionDB) -> None:
    await run_trip(store)
    hits = await store.search_messages("breeze")
    assert [(h["session_id"], h["role"]) for h in hits] == [("trip", "tool")]
    assert (await store.search_messages("degrés"))[0]["session_id"] == "trip"


def test_runner_run_sync_turns_on_new_loops_in_worker_threads(store: SessionDB) -> None:
    """``Runner.run_sync`` runs each turn on a new event loop; here each turn in a worker thread, as hosts do."""
    model = ScriptedModel([[say(f"answer {n}", f"msg_{n}")] for n in range(3)])
    agent = Agent(name="assistant", instructions="Answer.", model=model)
    session = HermesSession("sync-chat", store)
    config = RunConfig(tracing_disabled=True)
    outputs: list[str] = []
    for n in range(3):
        worker = threading.Thread(
            target=lambda n=n: outputs.append(Runner.run_sync(agent, f"question {n}", session=session, run_config=config).final_output)
        )
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "a turn hung"
    assert outputs == ["answer 0", "answer 1", "answer 2"]
    assert model.inputs[-1][-1] == {"content": "question 2", "role": "user"}
    assert len(model.inputs[-1]) == 5  # the two earlier turns, read back from the store

    async def stored() -> list[Any]:
        return await session.get_items()

    items = asyncio.run(stored())
    assert [item.get("content") if "role" in item and item["role"] == "user" else item.get("type") for item in items] == [
        "question 0", "message", "question 1", "message", "question 2", "message"
    ]


async def test_add_items_from_ten_threads_with_their_own_loops(store: SessionDB) -> None:
    session = HermesSession("crowd", store)
    await session.add_items([{"role": "user", "content": "start"}])  # the test's loop is the home, and keeps running

    def add(n: int) -> None:
        asyncio.run(session.add_items([{"role": "user", "content": f"t{n}-{i}"} for i in range(3)]))

    await asyncio.wait_for(asyncio.gather(*(asyncio.to_thread(add, n) for n in range(10))), timeout=120)
    got = await session.get_items()
    assert len(got) == 31 and got[0]["content"] == "start"
    assert sorted(item["content"] for item in got[1:]) == sorted(f"t{n}-{i}" for n in range(10) for i in range(3))
