"""OpenAI Agents SDK agents keeping their sessions in one hermes-state store, without an API key.

A scripted ``Model`` stands in for the LLM, so this runs offline: three
agents run concurrently on one ``SessionDB`` (one writer, group commits),
one calls a tool, one continues a conversation from its stored history, and
the transcripts are searched with ``search_messages``.

    pip install '.[openai-agents]'
    python3 examples/openai_agents_session.py [--home DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from hermes_state import SessionDB
from hermes_state.integrations.openai_agents import HermesSession


class OfflineModel(Model):
    """Answers from a script: asks for the ``lookup_order`` tool once, then replies with what it got."""

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id, conversation_id, prompt) -> ModelResponse:  # type: ignore[no-untyped-def]
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        last = items[-1]
        if last.get("type") == "function_call_output":
            reply = f"Your order status: {last['output']}."
        elif "order" in str(last.get("content", "")) and tools:
            call = ResponseFunctionToolCall(type="function_call", name="lookup_order", arguments='{"order_id": "A-17"}',
                                            call_id=f"call_{len(items)}", id=f"fc_{len(items)}")
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        else:
            users = [i["content"] for i in items if i.get("role") == "user"]
            reply = f"I have {len(users)} message(s) from you so far; the first was {users[0]!r}."
        message = ResponseOutputMessage(id=f"msg_{len(items)}", type="message", role="assistant", status="completed",
                                        content=[ResponseOutputText(type="output_text", text=reply, annotations=[])])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this offline model only serves Runner.run")


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's shipping status."""
    return f"{order_id} shipped on Tuesday via parcel post"


async def main(home: Path) -> None:
    db = SessionDB(home / "state.db")  # one store for every agent of this process
    agent = Agent(name="support", instructions="Help customers.", model=OfflineModel(), tools=[lookup_order])
    config = RunConfig(tracing_disabled=True)
    try:
        questions = {"alice": "Where is my order?", "bob": "Hello there", "carol": "Do you ship abroad?"}
        results = await asyncio.gather(*(
            Runner.run(agent, text, session=HermesSession(f"support-{who}", db), run_config=config)
            for who, text in questions.items()
        ))
        for who, result in zip(questions, results):
            print(f"{who}: {result.final_output}")

        bob = HermesSession("support-bob", db)
        follow_up = await Runner.run(agent, "And another thing", session=bob, run_config=config)
        print(f"bob again: {follow_up.final_output}")
        print(f"bob's session holds {len(await bob.get_items())} items; the last two:")
        for item in await bob.get_items(limit=2):
            print(f"  {item}")

        for hit in await db.search_messages("parcel"):
            print(f"search 'parcel': {hit['session_id']} {hit['role']}: {hit['snippet']}")
        popped = await bob.pop_item()
        print(f"pop_item removed bob's last item: {popped['content'][0]['text']!r}")  # type: ignore[index]
    finally:
        await db.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="directory for state.db (default: a temp dir)")
    args = parser.parse_args()
    asyncio.run(main(args.home or Path(tempfile.mkdtemp(prefix="hermes-agents-sdk-"))))
