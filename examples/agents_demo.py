"""A host running several agents on one shared store, resuming one and searching past sessions.

No API key and no network: the "model" is a small rule-based function served
either over a loopback chat-completions server on 127.0.0.1 (through the
official ``openai`` SDK, when installed) or directly as an in-process provider.

    python examples/agents_demo.py                 # loopback HTTP if openai is installed
    python examples/agents_demo.py --provider toy  # in-process, no openai needed

The demo keeps its files in a temporary HERMES_HOME, removed at the end, unless
you pass --home. It exits with status 1 when any agent turn fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from hermes_agent import (
    AIAgent,
    OpenAIChatProvider,
    ProviderReply,
    ProviderRequest,
    Usage,
    load_resume_history,
    session_search,
    tool,
)
from hermes_agent.loopback import LoopbackChatServer
from hermes_state import SessionDB

# ------------------------------------------------------------------ the toy model


def toy_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Decide the next assistant message from the conversation (what a real model would do)."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"content": _describe_tool_result(last["content"])}
    text = last.get("content") or ""
    weather = re.search(r"weather in (\w+)", text, re.IGNORECASE)
    if weather:
        return _call("get_weather", {"city": weather.group(1)})
    if text.lower().startswith("recall "):
        return _call("session_search", {"query": text[7:].strip(), "limit": 3})
    if text.lower().startswith("what was i doing"):
        return _call("session_search", {})
    return {"content": f"Noted: {text}"}


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"id": f"call_{name}_{abs(hash(json.dumps(arguments))) % 10**6}",
                                            "type": "function",
                                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _describe_tool_result(content: str) -> str:
    try:
        payload = json.loads(content)
    except ValueError:
        return f"The tool said: {content[:120]}"
    if payload.get("mode") == "discover":
        if not payload.get("results"):
            return "I could not find that in earlier sessions."
        best = payload["results"][0]
        return f"Found it in {best['link']}: {best['snippet']}"
    if payload.get("mode") == "browse":
        return "Recent sessions: " + ", ".join(r["link"] for r in payload.get("results", []))
    if "forecast" in payload:
        return f"{payload['city']}: {payload['forecast']}, {payload['temp_c']} °C."
    return f"The tool said: {content[:120]}"


def _usage(messages: list[dict[str, Any]], reply: dict[str, Any]) -> dict[str, int]:
    prompt = sum(len(json.dumps(m)) for m in messages) // 4
    return {"prompt_tokens": prompt, "completion_tokens": len(json.dumps(reply)) // 4}


class ToyProvider:
    """The toy model as an in-process provider (no HTTP, no SDK)."""

    name = "toy"
    base_url = None

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        if request.purpose == "compression":
            return ProviderReply({"role": "assistant", "content": "Summary of the earlier conversation."})
        reply = toy_model(request.messages)
        usage = _usage(request.messages, reply)
        return ProviderReply({"role": "assistant", **reply},
                             Usage(usage["prompt_tokens"], usage["completion_tokens"]))


def loopback_responder(body: dict[str, Any]) -> dict[str, Any]:
    reply = toy_model(body["messages"])
    return {**reply, "usage": _usage(body["messages"], reply)}


# ------------------------------------------------------------------------- tools


@tool(description="Current weather for a city.", parallel_safe=True,
      parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
async def get_weather(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    city = arguments["city"].title()
    forecasts = ["sunny", "cloudy", "light rain", "windy"]
    return {"city": city, "forecast": forecasts[len(city) % 4], "temp_c": 12 + len(city)}


# -------------------------------------------------------------------------- host


def _failed(label: str, result: dict[str, Any], failures: list[str]) -> None:
    if result.get("failed"):
        failures.append(f"{label}: {result.get('error') or result.get('turn_exit_reason') or 'turn failed'}")


async def run(provider_kind: str) -> list[str]:
    """Run the demo; returns one line per failed agent turn (empty when all succeeded)."""
    from hermes_agent import SESSION_SEARCH_TOOL

    failures: list[str] = []
    tools = [get_weather, SESSION_SEARCH_TOOL]
    db = SessionDB()  # $HERMES_HOME/state.db, shared by every agent of this process
    server: LoopbackChatServer | None = None
    try:
        if provider_kind == "loopback":
            server = LoopbackChatServer(loopback_responder)
            await server.start()

        def provider() -> Any:
            if server is None:
                return ToyProvider()
            return OpenAIChatProvider(base_url=server.base_url, api_key="not-needed", stream=True, name="loopback")

        def agent(**kwargs: Any) -> AIAgent:
            return AIAgent(provider(), session_db=db, model="toy-1", tools=tools, close_provider=True, **kwargs)

        print(f"store: {db.db_path}  provider: {provider_kind}")

        # 1. Several agents, one store, concurrently.
        prompts = [
            "Remember that the project codename is BLUEBIRD.",
            "What's the weather in Paris?",
            "What's the weather in Lisbon?",
            "Our release train leaves on Thursdays.",
        ]
        agents = [agent() for _ in prompts]
        results = await asyncio.gather(*(a.run_conversation(p) for a, p in zip(agents, prompts)))
        for a, result in zip(agents, results):
            _failed(a.session_id, result, failures)
            stored = await db.get_messages(a.session_id)
            print(f"  {a.session_id}: {result['final_response']!r}  ({len(stored)} rows)")
        await asyncio.gather(*(a.close() for a in agents))  # ends each session; the store stays open

        # 2. Resume the first session in a new agent: same session id, stored system prompt reused.
        first_id = agents[0].session_id
        tip, history = await load_resume_history(db, first_id)
        resumed = agent(session_id=tip)
        result = await resumed.run_conversation("Also remember: demo day is Friday.", conversation_history=history)
        _failed(f"resumed {tip}", result, failures)
        rows = await db.get_messages(tip)
        print(f"resumed {tip} (same id: {tip == first_id}): {result['final_response']!r}, now {len(rows)} rows")
        await resumed.close()

        # 3. A new agent recalls something from another session with session_search.
        recaller = agent()
        recalled = await recaller.run_conversation("recall BLUEBIRD")
        _failed("recall", recalled, failures)
        print(f"recall: {recalled['final_response']}")
        await recaller.close()

        # 4. The host can call the tool function itself too (browse shape).
        recent = json.loads(await session_search(db=db, limit=3))
        print("recent sessions:", [r["session_id"] for r in recent["results"]])
        session = await db.get_session(first_id)
        print(f"tokens recorded for {first_id}: in={session['input_tokens']} out={session['output_tokens']} "
              f"calls={session['api_call_count']} end_reason={session['end_reason']}")
    finally:
        if server is not None:
            await server.close()
        await db.close()  # once, at shutdown
    return failures


def main(argv: list[str] | None = None) -> int:
    """Run the demo from the command line; returns the exit status (1 if any turn failed)."""
    try:
        import openai  # noqa: F401

        default = "loopback"
    except ImportError:
        default = "toy"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", choices=["loopback", "toy"], default=default)
    parser.add_argument("--home", help="HERMES_HOME to use (default: a temporary directory)")
    args = parser.parse_args(argv)
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="hermes-agents-demo-"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(home)
    try:
        failures = asyncio.run(run(args.provider))
    finally:
        if not args.home:  # a home we created is ours to remove; one the user named is theirs
            shutil.rmtree(home, ignore_errors=True)
    for failure in failures:
        print(f"agent turn failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
