"""AIAgent storage contract: persistence order, tool loop rows, usage, ownership, concurrency, trajectories."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_agent import (
    AIAgent,
    ProviderError,
    ProviderRequest,
    ScriptedProvider,
    Usage,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from hermes_agent.transcript import RESULT_UNAVAILABLE, wire_messages
from hermes_state import SessionDB

from .test_agent_support import SpyDB, opened, recording_tool, rows


@pytest.fixture
async def spy(db_path: Path) -> AsyncIterator[SpyDB]:
    async with opened(SpyDB(db_path)) as db:
        yield db


@pytest.fixture(autouse=True)
def _plain_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_SESSION_SOURCE", raising=False)
    monkeypatch.delenv("TERMINAL_ENV", raising=False)


def _seen_by_provider(events: list[tuple[Any, ...]], reply: Any) -> Any:
    def step(request: ProviderRequest) -> Any:
        events.append(("provider", len(request.messages)))
        return reply

    return step


# ------------------------------------------------------------------ construction


async def test_session_db_must_expose_native_coroutines(db_path: Path) -> None:
    class SyncStore:
        def create_session(self, *a: Any, **k: Any) -> None: ...
        async def append_message(self, *a: Any, **k: Any) -> None: ...
        def get_session(self, *a: Any) -> None: ...
        async def end_session(self, *a: Any) -> None: ...
        async def close(self) -> None: ...

    with pytest.raises(TypeError, match="native async SessionDB methods.*create_session, get_session"):
        AIAgent(ScriptedProvider(), session_db=SyncStore())
    with pytest.raises(TypeError, match="async complete"):
        AIAgent(object())  # type: ignore[arg-type]
    agent = AIAgent(ScriptedProvider(), session_db=SessionDB(db_path))
    assert agent.session_db is not None and not agent.owns_session_db
    assert len(agent.session_id.split("_")) == 3 and len(agent.session_id.split("_")[2]) == 6


# -------------------------------------------------------------- persistence order


async def test_tool_loop_persists_each_row_at_its_durable_point(spy: SpyDB) -> None:
    events = spy.events
    provider = ScriptedProvider([
        _seen_by_provider(events, tool_calls_reply(tool_call("echo", {"text": "hi"}, call_id="c1"),
                                                   usage=Usage(11, 7), reasoning="look it up")),
        _seen_by_provider(events, text_reply("all done", Usage(11, 7))),
    ])
    agent = AIAgent(provider, session_db=spy, model="test-model", tools=[recording_tool(events)])
    result = await agent.run_conversation("hello")

    assert result["completed"] and result["final_response"] == "all done"
    order = [e for e in events if e[0] != "usage"]
    assert order == [
        ("create_session", agent.session_id),
        ("append", "user"),
        ("provider", 2),
        ("append", "assistant"),
        ("tool", "echo", {"text": "hi"}),
        ("append", "tool"),
        ("provider", 4),
        ("append", "assistant"),
    ]
    stored = await spy.get_messages(agent.session_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == "c1" and stored[1]["reasoning"] == "look it up"
    assert stored[2]["tool_call_id"] == "c1" and stored[2]["tool_name"] == "echo"
    assert json.loads(stored[2]["content"]) == {"tool": "echo", "args": {"text": "hi"}}
    session = await spy.get_session(agent.session_id)
    assert session["source"] == "cli" and session["model"] == "test-model"
    assert json.loads(session["model_config"])["max_iterations"] == 90
    assert session["system_prompt"] == agent.system_prompt
    assert (session["input_tokens"], session["output_tokens"], session["api_call_count"]) == (22, 14, 2)
    assert session["billing_provider"] == "scripted"
    assert result["usage"]["input_tokens"] == 22 and result["input_tokens"] == 22
    # Private markers never reach the provider.
    assert all(not k.startswith("_") for r in provider.requests for m in r.messages for k in m)


async def test_rows_are_durable_before_the_provider_and_before_tools(spy: SpyDB) -> None:
    snapshots: dict[str, Any] = {}

    async def first(request: ProviderRequest) -> Any:
        snapshots["before_provider"] = await rows(spy, agent.session_id)
        return tool_calls_reply(tool_call("inspect", {}, call_id="c1"))

    async def inspect_db(arguments: dict[str, Any], context: Any) -> str:
        snapshots["before_tool"] = [m["role"] for m in await spy.get_messages(context.session_id)]
        return "seen"

    from hermes_agent import Tool

    inspect_tool = Tool("inspect", "look at the store", {"type": "object", "properties": {}}, inspect_db)
    agent = AIAgent(ScriptedProvider([first, "ok"]), session_db=spy, tools=[inspect_tool])
    await agent.run_conversation("question")
    assert snapshots["before_provider"] == [("user", "question")]
    assert snapshots["before_tool"] == ["user", "assistant"]


async def test_failed_persist_before_tools_stops_the_turn(spy: SpyDB) -> None:
    events: list[tuple[Any, ...]] = []
    spy.fail_append = lambda role, kw: role == "assistant" and bool(kw.get("tool_calls"))
    provider = ScriptedProvider([tool_calls_reply(tool_call("echo", {"text": "x"})), "never reached"])
    agent = AIAgent(provider, session_db=spy, tools=[recording_tool(events)])
    result = await agent.run_conversation("do it")

    assert result["failed"] and not result["completed"]
    assert result["turn_exit_reason"] == "session_persistence_failed"
    assert result["final_response"] == ""
    assert "disk I/O error" in result["error"]
    assert events == []  # the tool never ran
    assert provider.remaining == 1
    assert await rows(spy, agent.session_id) == [("user", "do it")]


async def test_failed_segment_persist_skips_later_segments(spy: SpyDB) -> None:
    events: list[tuple[Any, ...]] = []
    spy.fail_append = lambda role, kw: role == "tool" and kw.get("tool_call_id") == "a"
    calls = [tool_call("first", {}, call_id="a"), tool_call("second", {}, call_id="b")]
    agent = AIAgent(ScriptedProvider([tool_calls_reply(*calls), "unused"]), session_db=spy,
                    tools=[recording_tool(events, "first"), recording_tool(events, "second")])
    result = await agent.run_conversation("two steps")
    assert result["turn_exit_reason"] == "session_persistence_failed"
    assert [e[1] for e in events] == ["first"]
    assert [r for r, _ in await rows(spy, agent.session_id)] == ["user", "assistant"]


# ------------------------------------------------------------- history and writes


async def test_history_is_never_written_again(spy: SpyDB) -> None:
    provider = ScriptedProvider(["first answer", "second answer"])
    agent = AIAgent(provider, session_db=spy, tools=[])
    one = await agent.run_conversation("first")
    two = await agent.run_conversation("second", conversation_history=one["messages"])
    assert two["final_response"] == "second answer"
    assert await rows(spy, agent.session_id) == [
        ("user", "first"), ("assistant", "first answer"), ("user", "second"), ("assistant", "second answer"),
    ]
    first_wire = provider.requests[0].messages
    assert provider.requests[1].messages[: len(first_wire)] == first_wire  # exact replay prefix


async def test_agent_keeps_no_history_between_turns(spy: SpyDB) -> None:
    provider = ScriptedProvider(["a1", "a2"])
    agent = AIAgent(provider, session_db=spy, tools=[])
    assert await agent.chat("first") == "a1"
    assert await agent.chat("second") == "a2"
    assert [m["role"] for m in provider.requests[1].messages] == ["system", "user"]
    assert [r for r, _ in await rows(spy, agent.session_id)] == ["user", "assistant", "user", "assistant"]


async def test_host_precreated_row_is_enriched_not_overwritten(spy: SpyDB) -> None:
    await spy.create_session("host-made", "api", user_id="u-1")
    agent = AIAgent(ScriptedProvider(["hi"]), session_db=spy, session_id="host-made", model="m",
                    platform="telegram", tools=[])
    await agent.chat("hello")
    session = await spy.get_session("host-made")
    assert session["source"] == "api" and session["user_id"] == "u-1"
    assert session["model"] == "m" and session["system_prompt"] == agent.system_prompt


async def test_platform_is_the_row_source_and_parent_is_linked(spy: SpyDB) -> None:
    await spy.create_session("parent", "cli")
    agent = AIAgent(ScriptedProvider(["sub answer"]), session_db=spy, platform="subagent",
                    parent_session_id="parent", tools=[])
    await agent.chat("delegated task")
    session = await spy.get_session(agent.session_id)
    assert session["source"] == "subagent" and session["parent_session_id"] == "parent"
    assert session["cwd"] is None  # only local CLI sessions record a cwd


async def test_dangling_tool_call_in_history_gets_a_wire_stub_only(spy: SpyDB) -> None:
    history = [{"role": "user", "content": "run it"},
               {"role": "assistant", "content": "", "tool_calls": [tool_call("echo", {}, call_id="lost")]}]
    provider = ScriptedProvider(["recovered"])
    agent = AIAgent(provider, session_db=spy, tools=[])
    await agent.run_conversation("again", conversation_history=history)
    sent = provider.requests[0].messages
    assert sent[3] == {"role": "tool", "tool_call_id": "lost", "content": RESULT_UNAVAILABLE}
    assert await rows(spy, agent.session_id) == [("user", "again"), ("assistant", "recovered")]


def test_wire_messages_drop_orphans_and_private_keys() -> None:
    messages = [
        {"role": "user", "content": "q", "_row_id": 4, "timestamp": 1.0},
        {"role": "tool", "tool_call_id": "orphan", "content": "x"},
        {"role": "assistant", "content": "a", "tool_calls": []},
    ]
    assert wire_messages("sys", messages) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


# ----------------------------------------------------------------- failure paths


async def test_provider_error_fails_the_turn_but_keeps_the_user_row(spy: SpyDB) -> None:
    agent = AIAgent(ScriptedProvider([ProviderError("upstream 500")]), session_db=spy, tools=[])
    result = await agent.run_conversation("hello?")
    assert result["failed"] and result["turn_exit_reason"] == "provider_error"
    assert "upstream 500" in result["error"]
    assert await rows(spy, agent.session_id) == [("user", "hello?")]


async def test_iteration_limit_closes_the_turn(spy: SpyDB) -> None:
    events: list[tuple[Any, ...]] = []
    provider = ScriptedProvider([tool_calls_reply(tool_call("echo", {})) for _ in range(3)])
    agent = AIAgent(provider, session_db=spy, tools=[recording_tool(events)], max_iterations=2)
    result = await agent.run_conversation("loop forever")
    assert result["turn_exit_reason"] == "max_iterations" and not result["completed"]
    assert [r for r, _ in await rows(spy, agent.session_id)] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant"]


async def test_interrupt_stops_at_a_safe_point_and_closes_the_tail(spy: SpyDB) -> None:
    from hermes_agent import Tool

    async def stop(arguments: dict[str, Any], context: Any) -> str:
        context.agent.interrupt()
        return "stopping"

    events: list[tuple[Any, ...]] = []
    calls = [tool_call("stop", {}, call_id="s"), tool_call("echo", {}, call_id="e")]
    agent = AIAgent(ScriptedProvider([tool_calls_reply(*calls)]), session_db=spy,
                    tools=[Tool("stop", "interrupt", {"type": "object", "properties": {}}, stop),
                           recording_tool(events)])
    result = await agent.run_conversation("go")
    assert result["interrupted"] and not result["failed"]
    assert events == []
    stored = await rows(spy, agent.session_id)
    assert stored == [
        ("user", "go"),
        ("assistant", None),
        ("tool", "stopping"),
        ("tool", "[Tool execution cancelled — call was skipped due to user interrupt]"),
        ("assistant", "Operation interrupted."),
    ]


# ------------------------------------------------------------------- ownership


async def test_close_ends_a_borrowed_store_session_but_leaves_the_store_open(spy: SpyDB) -> None:
    agent = AIAgent(ScriptedProvider(["hi"]), session_db=spy, tools=[])
    await agent.chat("hello")
    await agent.close()
    await agent.close()  # idempotent
    assert agent.closed and agent.session_db is None
    assert [e for e in spy.events if e[0] in ("end_session", "close")] == [
        ("end_session", agent.session_id, "agent_close")]
    assert not spy.closed
    assert (await spy.get_session(agent.session_id))["end_reason"] == "agent_close"
    await spy.append_message(agent.session_id, "user", "the store still works")
    with pytest.raises(RuntimeError, match="closed"):
        await agent.chat("after close")


async def test_close_keeps_an_earlier_end_reason(spy: SpyDB) -> None:
    agent = AIAgent(ScriptedProvider(["hi"]), session_db=spy, tools=[])
    await agent.chat("hello")
    await spy.end_session(agent.session_id, "user_exit")
    await agent.close()
    assert (await spy.get_session(agent.session_id))["end_reason"] == "user_exit"


async def test_without_a_store_nothing_is_persisted(hermes_home: Path, tmp_path: Path) -> None:
    agent = AIAgent(ScriptedProvider(["fine"]), tools=[], save_trajectories=True, trajectory_dir=tmp_path / "traj")
    result = await agent.run_conversation("hello")
    assert result["completed"]
    await agent.close()
    assert not (hermes_home / "state.db").exists()
    assert (tmp_path / "traj" / "trajectory_samples.jsonl").exists()


async def test_session_search_opens_an_owned_store_that_close_closes(hermes_home: Path) -> None:
    provider = ScriptedProvider([
        tool_calls_reply(tool_call("session_search", {"session_id": "no-such-session"}, call_id="r1"),
                         usage=Usage(5, 3)),
        text_reply("nothing there", Usage(6, 2)),
    ])
    agent = AIAgent(provider)  # default tools: session_search
    assert [t.name for t in agent.tools] == ["session_search"]
    result = await agent.run_conversation("what did we say before?")
    assert result["completed"]
    assert agent.owns_session_db
    owned = agent.session_db
    assert Path(owned.db_path) == hermes_home / "state.db"
    tool_result = json.loads(result["messages"][2]["content"])
    assert tool_result == {"error": "session_id not found: no-such-session", "success": False}
    await agent.close()
    assert owned.closed and agent.session_db is None

    db = SessionDB(hermes_home / "state.db")
    try:
        assert [r for r, _ in await rows(db, agent.session_id)] == ["user", "assistant", "tool", "assistant"]
        session = await db.get_session(agent.session_id)
        assert session["end_reason"] == "agent_close"
        # The call made before the store existed is recorded once the row is created.
        assert (session["input_tokens"], session["api_call_count"]) == (11, 2)
    finally:
        await db.close()


async def test_persist_disabled_agent_never_writes(spy: SpyDB) -> None:
    agent = AIAgent(ScriptedProvider(["quiet"]), session_db=spy, tools=[], persist_disabled=True)
    await agent.chat("shh")
    await agent.close()
    assert spy.events == []


# ----------------------------------------------------------------- concurrency


async def test_turns_of_one_agent_are_serialized(spy: SpyDB) -> None:
    in_flight = 0
    peak = 0

    async def slow(request: ProviderRequest) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return "done"

    agent = AIAgent(ScriptedProvider([slow, slow, slow]), session_db=spy, tools=[])
    await asyncio.gather(*(agent.chat(f"q{i}") for i in range(3)))
    assert peak == 1
    assert len(await rows(spy, agent.session_id)) == 6


async def test_distinct_agents_run_in_parallel_on_one_store(spy: SpyDB) -> None:
    both_inside = asyncio.Event()
    arrived = 0

    async def meet(request: ProviderRequest) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_inside.set()
        await asyncio.wait_for(both_inside.wait(), 5)  # only possible if both calls are in flight together
        return "met"

    agents = [AIAgent(ScriptedProvider([meet]), session_db=spy, tools=[]) for _ in range(2)]
    assert await asyncio.gather(*(a.chat("hi") for a in agents)) == ["met", "met"]


async def test_twenty_agents_share_one_store(spy: SpyDB) -> None:
    events: list[tuple[Any, ...]] = []
    agents = []
    for index in range(20):
        script = [
            tool_calls_reply(tool_call("echo", {"text": f"agent {index}"}), usage=Usage(3, 1)),
            text_reply(f"answer {index}", Usage(4, 2)),
            text_reply(f"second {index}", Usage(1, 1)),
        ]
        agents.append(AIAgent(ScriptedProvider(script), session_db=spy, tools=[recording_tool(events)]))

    async def converse(agent: AIAgent) -> None:
        first = await agent.run_conversation("start")
        await agent.run_conversation("more", conversation_history=first["messages"])

    await asyncio.gather(*(converse(a) for a in agents))
    for index, agent in enumerate(agents):
        stored = await rows(spy, agent.session_id)
        assert [r for r, _ in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert stored[3] == ("assistant", f"answer {index}")
        assert (await spy.get_session(agent.session_id))["input_tokens"] == 8
    await asyncio.gather(*(a.close() for a in agents))
    assert not spy.closed
    assert await spy.message_count() == 120
    ended = [await spy.get_session(a.session_id) for a in agents]
    assert {s["end_reason"] for s in ended} == {"agent_close"}


# ------------------------------------------------------------------ trajectories


async def test_trajectories_are_written_per_turn(spy: SpyDB, tmp_path: Path) -> None:
    events: list[tuple[Any, ...]] = []
    provider = ScriptedProvider([
        tool_calls_reply(tool_call("echo", {"text": "x"}, call_id="c1"), reasoning="think first"),
        text_reply("final"),
        ProviderError("boom"),
    ])
    out = tmp_path / "trajectories"
    agent = AIAgent(provider, session_db=spy, model="traj-model", tools=[recording_tool(events)],
                    save_trajectories=True, trajectory_dir=out)
    await agent.run_conversation("use the tool")
    await agent.run_conversation("this one fails")

    (sample,) = [json.loads(line) for line in (out / "trajectory_samples.jsonl").read_text().splitlines()]
    assert sample["completed"] is True and sample["model"] == "traj-model"
    assert sample["session_id"] == agent.session_id and "T" in sample["timestamp"]
    kinds = [e["from"] for e in sample["conversations"]]
    assert kinds == ["system", "human", "gpt", "tool", "gpt"]
    system, human, call, result, final = (e["value"] for e in sample["conversations"])
    assert "<tools>" in system and '"name": "echo"' in system
    assert human == "use the tool"
    assert call.startswith("<think>\nthink first\n</think>\n")
    assert json.loads(call.split("<tool_call>\n")[1].split("\n</tool_call>")[0]) == {
        "name": "echo", "arguments": {"text": "x"}}
    assert json.loads(result.split("<tool_response>\n")[1].split("\n</tool_response>")[0]) == {
        "tool_call_id": "c1", "name": "echo", "content": {"tool": "echo", "args": {"text": "x"}}}
    assert final == "<think>\n</think>\nfinal"
    (failed,) = [json.loads(line) for line in (out / "failed_trajectories.jsonl").read_text().splitlines()]
    assert failed["completed"] is False
    assert [e["from"] for e in failed["conversations"]] == ["system", "human"]


async def test_queued_usage_store_gets_increments(db_path: Path) -> None:
    """A store with ``queue_token_counts`` gets each call as one increment (api_call_count=1)."""

    class QueueingDB(SessionDB):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.queued: list[dict[str, Any]] = []

        async def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
            self.queued.append(kwargs)
            await self.update_token_counts(session_id, **kwargs)

    db = QueueingDB(db_path)
    try:
        agent = AIAgent(ScriptedProvider([text_reply("a", Usage(11, 7)), text_reply("b", Usage(2, 1))]),
                        session_db=db, model="m", tools=[])
        await agent.chat("one")
        await agent.chat("two")
        assert [(q["input_tokens"], q["output_tokens"], q["api_call_count"]) for q in db.queued] == [
            (11, 7, 1), (2, 1, 1)]
        assert all(q["model"] == "m" and q["billing_provider"] == "scripted" for q in db.queued)
        session = await db.get_session(agent.session_id)
        assert (session["input_tokens"], session["output_tokens"], session["api_call_count"]) == (13, 8, 2)
    finally:
        await db.close()


async def test_sqlite_error_on_create_is_retried_at_the_next_write(spy: SpyDB) -> None:
    original = SpyDB.create_session
    failures = {"left": 1}

    async def flaky(self: SpyDB, session_id: str, source: str, **kwargs: Any) -> str:
        if failures["left"]:
            failures["left"] -= 1
            raise sqlite3.OperationalError("database is locked")
        return await original(self, session_id, source, **kwargs)

    spy.create_session = flaky.__get__(spy)  # type: ignore[method-assign]
    agent = AIAgent(ScriptedProvider(["ok"]), session_db=spy, tools=[])
    result = await agent.run_conversation("hello")
    assert result["completed"]
    assert await rows(spy, agent.session_id) == [("user", "hello"), ("assistant", "ok")]


# ------------------------------------------------------------------ tool dispatch


async def test_bad_calls_become_error_results_in_call_order(spy: SpyDB) -> None:
    from hermes_agent import Tool

    async def explode(arguments: dict[str, Any], context: Any) -> str:
        raise ValueError("no fuel")

    async def chatty(arguments: dict[str, Any], context: Any) -> str:
        return "x" * 50

    bad_json = {"id": "j", "type": "function", "function": {"name": "chatty", "arguments": "{not json"}}
    calls = [tool_call("missing", {}, call_id="m"), bad_json, tool_call("explode", {}, call_id="e"),
             tool_call("chatty", {}, call_id="c")]
    schema = {"type": "object", "properties": {}}
    agent = AIAgent(ScriptedProvider([tool_calls_reply(*calls), "handled"]), session_db=spy,
                    tools=[Tool("explode", "fails", schema, explode), Tool("chatty", "long", schema, chatty)],
                    max_tool_result_chars=10)
    await agent.run_conversation("try everything")
    results = [(m["tool_call_id"], m["content"]) for m in await spy.get_messages(agent.session_id)
               if m["role"] == "tool"]
    assert [r[0] for r in results] == ["m", "j", "e", "c"]
    assert results[0][1] == "Error: unknown tool 'missing'"
    assert results[1][1].startswith("Error: invalid JSON arguments for chatty")
    assert results[2][1] == "Error executing tool explode: ValueError: no fuel"
    assert results[3][1] == "xxxxxxxxxx\n[truncated: 50 characters in total]"


async def test_parallel_safe_calls_run_concurrently(spy: SpyDB) -> None:
    from hermes_agent import Tool

    arrived = 0
    both = asyncio.Event()

    async def meet(arguments: dict[str, Any], context: Any) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        return f"met {arguments['n']}"

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    calls = [tool_call("meet", {"n": 1}, call_id="a"), tool_call("meet", {"n": 2}, call_id="b")]
    agent = AIAgent(ScriptedProvider([tool_calls_reply(*calls), "ok"]), session_db=spy,
                    tools=[Tool("meet", "rendezvous", schema, meet, parallel_safe=True)])
    result = await agent.run_conversation("together")
    assert result["completed"]
    assert [c for r, c in await rows(spy, agent.session_id) if r == "tool"] == ["met 1", "met 2"]


async def test_system_message_joins_the_prompt_and_the_row(spy: SpyDB) -> None:
    provider = ScriptedProvider(["ok"])
    agent = AIAgent(provider, session_db=spy, system_prompt="Base rules.", tools=[])
    await agent.run_conversation("hi", system_message="Answer in French.")
    assert agent.system_prompt == "Base rules.\n\nAnswer in French."
    assert provider.requests[0].messages[0] == {"role": "system", "content": agent.system_prompt}
    assert (await spy.get_session(agent.session_id))["system_prompt"] == agent.system_prompt
