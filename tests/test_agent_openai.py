"""OpenAIChatProvider against a real loopback HTTP server speaking chat completions (JSON and SSE)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_agent import AIAgent, OpenAIChatProvider, tool
from hermes_agent.loopback import LoopbackChatServer
from hermes_agent.providers import usage_from_openai
from hermes_state import SessionDB

# PostgreSQL: this module's methods are not on that backend yet (issue 11 phase 2); drop the mark when they are.
pytestmark = pytest.mark.backends("sqlite")

pytest.importorskip("openai")


@tool(description="add two integers",
      parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
async def add(arguments: dict[str, Any], context: Any) -> int:
    return arguments["a"] + arguments["b"]


def calculator(request: dict[str, Any]) -> dict[str, Any]:
    """Ask for the add tool once, then answer with its result."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return {"content": f"2 + 3 = {last['content']}", "usage": {"prompt_tokens": 30, "completion_tokens": 9}}
    return {
        "content": None,
        "reasoning": "I should use the add tool.",
        "tool_calls": [{"id": "call_add", "type": "function",
                        "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_tool_loop_over_http(stream: bool, store: SessionDB) -> None:
    async with LoopbackChatServer(calculator) as server:
        provider = OpenAIChatProvider(base_url=server.base_url, api_key="test-key", stream=stream, name="loopback")
        agent = AIAgent(provider, session_db=store, model="loop-model", tools=[add], close_provider=True)
        result = await agent.run_conversation("What is 2 + 3?")
        await agent.close()

    assert result["completed"] and result["final_response"] == "2 + 3 = 5"
    stored = await store.get_messages(agent.session_id)
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "What is 2 + 3?"), ("assistant", None), ("tool", "5"), ("assistant", "2 + 3 = 5")]
    assert stored[1]["tool_calls"] == [{"id": "call_add", "type": "function",
                                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]
    assert stored[1]["reasoning"] == "I should use the add tool."
    session = await store.get_session(agent.session_id)
    assert (session["input_tokens"], session["output_tokens"], session["api_call_count"]) == (41, 16, 2)
    assert session["billing_provider"] == "loopback" and session["billing_base_url"] == server.base_url

    first, second = server.requests
    assert first["model"] == "loop-model" and first["tools"][0]["function"]["name"] == "add"
    assert bool(first.get("stream")) is stream
    assert second["messages"][: len(first["messages"])] == first["messages"]  # exact replay prefix
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_add", "content": "5"}
    assert provider._client is None  # closed by agent.close() (close_provider=True)


async def test_cancelled_http_request_persists_only_the_user_row(store: SessionDB) -> None:
    arrived = asyncio.Event()

    async def hang(request: dict[str, Any]) -> dict[str, Any]:
        arrived.set()
        await asyncio.Event().wait()
        return {}

    async with LoopbackChatServer(hang) as server:
        provider = OpenAIChatProvider(base_url=server.base_url, api_key="k", stream=True)
        agent = AIAgent(provider, session_db=store, tools=[], close_provider=True)
        task = asyncio.ensure_future(agent.run_conversation("are you there?"))
        await asyncio.wait_for(arrived.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await agent.close()
    assert [(m["role"], m["content"]) for m in await store.get_messages(agent.session_id)] == [
        ("user", "are you there?")]
    assert provider._client is None


def test_usage_mapping_splits_cached_prompt_tokens() -> None:
    usage = usage_from_openai({"prompt_tokens": 100, "completion_tokens": 20,
                               "prompt_tokens_details": {"cached_tokens": 60},
                               "completion_tokens_details": {"reasoning_tokens": 5}})
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (40, 60, 20, 5)
    assert usage_from_openai(None) is None


def test_openai_is_imported_lazily() -> None:
    root = Path(__file__).resolve().parent.parent
    code = (f"import sys; sys.path.insert(0, {str(root)!r}); import hermes_agent; "
            "hermes_agent.OpenAIChatProvider(base_url='http://127.0.0.1:9/v1'); print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
