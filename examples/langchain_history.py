"""LangChain chat history in a hermes-state store, from async and from synchronous code, without an API key.

A fake chat model from langchain-core stands in for the LLM. The async part
runs two conversations concurrently on one ``SessionDB``, including a tool
call round; the sync part uses the same store from plain synchronous code,
which needs no event loop of its own.

    pip install '.[langchain]'
    python3 examples/langchain_history.py [--home DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from hermes_state import SessionDB
from hermes_state.integrations.langchain import HermesChatMessageHistory
from hermes_state.integrations.loop_thread import close_store


async def turn(history: HermesChatMessageHistory, model: FakeMessagesListChatModel, text: str) -> BaseMessage:
    """One chat turn: stored history + the new question go to the model; both sides are stored."""
    question = HumanMessage(text)
    answer = await model.ainvoke([*await history.aget_messages(), question])
    await history.aadd_messages([question, answer])
    return answer


async def async_part(db: SessionDB) -> None:
    planner = FakeMessagesListChatModel(responses=[
        AIMessage("", tool_calls=[{"name": "forecast", "args": {"city": "Oslo"}, "id": "call_1"}], id="ai-1"),
        AIMessage("Pack a raincoat for Oslo.", id="ai-2"),
    ])
    poet = FakeMessagesListChatModel(responses=[AIMessage("Fog on the fjord, / the ferry hums.", id="ai-p")])
    trip = HermesChatMessageHistory("trip-oslo", db)
    haiku = HermesChatMessageHistory("haiku", db)
    await trip.aadd_messages([SystemMessage("You plan trips.")])
    call, _ = await asyncio.gather(turn(trip, planner, "Weather in Oslo next week?"),
                                   turn(haiku, poet, "A haiku about Oslo, please"))
    # Answer the tool call, then let the model finish.
    assert isinstance(call, AIMessage)
    await trip.aadd_messages([ToolMessage("rain, 9 C", tool_call_id=call.tool_calls[0]["id"], name="forecast")])
    final = await planner.ainvoke(await trip.aget_messages())
    await trip.aadd_messages([final])
    for message in await trip.aget_messages():
        print(f"trip  {message.type:>6}: {message.content or message.tool_calls}")  # type: ignore[attr-defined]
    for hit in await db.search_messages("Oslo", role_filter=["user"]):
        print(f"search 'Oslo' (user turns): {hit['session_id']}: {hit['snippet']}")


def sync_part(home: Path) -> None:
    db = SessionDB(home / "state.db")  # the sync methods run it on a background loop of its own
    history = HermesChatMessageHistory("trip-oslo", db)
    history.add_user_message("Thanks! Book the 10:04 train.")
    history.add_ai_message("Booked.")
    print(f"sync: {len(history.messages)} messages, last: {history.messages[-1].content!r}")
    close_store(db)  # commits, closes, and stops that loop


def main(home: Path) -> None:
    async def run() -> None:
        db = SessionDB(home / "state.db")
        try:
            await async_part(db)
        finally:
            await db.close()

    asyncio.run(run())
    sync_part(home)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="directory for state.db (default: a temp dir)")
    args = parser.parse_args()
    main(args.home or Path(tempfile.mkdtemp(prefix="hermes-langchain-")))
