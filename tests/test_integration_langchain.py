"""``HermesChatMessageHistory`` against LangChain's ``BaseChatMessageHistory`` contract, on real stores."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from hermes_state import SessionDB, StoreClosedError
from hermes_state.integrations.langchain import HermesChatMessageHistory
from hermes_state.integrations.loop_thread import LoopThread, close_store

from .adapter_support import reopen
from .cli_support import cli_env
from .raw_sql import is_postgres, store_target

def conversation() -> list[BaseMessage]:
    return [
        SystemMessage("You plan trips.", id="sys-1", additional_kwargs={"cache": {"type": "ephemeral"}}),
        HumanMessage(
            content=[{"type": "text", "text": "Train from Lyon to Genève?"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
            id="h-1",
            name="alice",
            response_metadata={"channel": "web"},
        ),
        AIMessage(
            content="Checking timetables.",
            id="ai-1",
            tool_calls=[
                {"name": "timetable", "args": {"from": "Lyon", "to": "Genève", "day": 3}, "id": "call_a", "type": "tool_call"},
                {"name": "prices", "args": {"class": 2}, "id": "call_b", "type": "tool_call"},
            ],
            usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
            response_metadata={"model_name": "stub", "finish_reason": "tool_calls", "temperature": 0.25},
        ),
        ToolMessage("08:04, 10:04, 12:04", tool_call_id="call_a", name="timetable", id="t-1", artifact={"rows": 3}),
        ToolMessage("error: no fares", tool_call_id="call_b", status="error", id="t-2"),
        AIMessage(
            content="",
            id="ai-2",
            invalid_tool_calls=[{"name": "prices", "args": "{bad", "id": "call_c", "error": "bad json", "type": "invalid_tool_call"}],
        ),
        FunctionMessage(content="legacy result", name="legacy_fn", id="f-1"),
        ChatMessage(content="a moderator note", role="moderator", id="c-1"),
        AIMessageChunk(content="streamed reply", id="chunk-1"),
        AIMessage(content="The 10:04 is direct. 🚆", id="ai-3", name="planner"),
    ]


def assert_same(got: list[BaseMessage], expected: list[BaseMessage]) -> None:
    assert [type(m) for m in got] == [type(m) for m in expected]
    assert got == expected
    assert [m.model_dump() for m in got] == [m.model_dump() for m in expected]


async def test_is_a_chat_message_history(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    assert isinstance(history, BaseChatMessageHistory)
    assert await history.aget_messages() == []


async def test_every_message_type_round_trips_with_ids_and_metadata(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    await history.aadd_messages(conversation())
    assert_same(await history.aget_messages(), conversation())


async def test_messages_added_one_by_one_keep_their_order(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    for message in conversation():
        await history.aadd_messages([message])
    assert_same(await history.aget_messages(), conversation())


async def test_histories_are_isolated(store: SessionDB) -> None:
    a, b = HermesChatMessageHistory("a", store), HermesChatMessageHistory("b", store)
    await a.aadd_messages([HumanMessage("only a", id="a-1")])
    await b.aadd_messages([HumanMessage("only b", id="b-1")])
    assert await a.aget_messages() == [HumanMessage("only a", id="a-1")]
    assert await b.aget_messages() == [HumanMessage("only b", id="b-1")]
    assert await HermesChatMessageHistory("b", store).aget_messages() == [HumanMessage("only b", id="b-1")]


async def test_clear_empties_only_this_history(store: SessionDB) -> None:
    a, b = HermesChatMessageHistory("a", store), HermesChatMessageHistory("b", store)
    await a.aadd_messages(conversation())
    await b.aadd_messages([HumanMessage("only b", id="b-1")])
    await a.aclear()
    assert await a.aget_messages() == []
    assert await b.aget_messages() == [HumanMessage("only b", id="b-1")]
    await a.aadd_messages([HumanMessage("again")])
    assert await a.aget_messages() == [HumanMessage("again")]

    def sync_clear() -> list[BaseMessage]:
        b.clear()
        return b.messages

    assert await asyncio.to_thread(sync_clear) == []


async def test_fifty_concurrent_histories_share_one_store(store: SessionDB) -> None:
    async def chat(n: int) -> None:
        history = HermesChatMessageHistory(f"user-{n}", store)
        for turn in range(10):
            await history.aadd_messages([HumanMessage(f"q{n}.{turn}"), AIMessage(f"a{n}.{turn}")])

    await asyncio.gather(*(chat(n) for n in range(50)))
    for n in range(50):
        got = await HermesChatMessageHistory(f"user-{n}", store).aget_messages()
        assert [m.content for m in got] == [f"{k}{n}.{t}" for t in range(10) for k in ("q", "a")]


async def test_a_store_reopened_from_disk_has_every_message(store: SessionDB) -> None:
    await HermesChatMessageHistory("chat", store).aadd_messages(conversation())
    await store.close()
    again = reopen(store)
    try:
        assert_same(await HermesChatMessageHistory("chat", again).aget_messages(), conversation())
    finally:
        await again.close()


@pytest.mark.backends("sqlite")  # search_messages is not on PostgreSQL yet (issue 11 phase 2)
async def test_transcript_is_searchable(store: SessionDB) -> None:
    await HermesChatMessageHistory("chat", store).aadd_messages(conversation())
    assert (await store.search_messages("Genève"))[0]["role"] == "user"
    assert (await store.search_messages("timetable"))[0]["session_id"] == "chat"
    hits = await store.search_messages("direct", role_filter=["assistant"])
    assert [h["session_id"] for h in hits] == ["chat"]
    session = await store.get_session("chat")
    assert session is not None and session["source"] == "langchain" and session["tool_call_count"] == 2
    rows = await store.get_messages("chat")
    assert [r["role"] for r in rows] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                         "moderator", "assistant", "assistant"]
    assert rows[2]["tool_calls"][0]["function"] == {"name": "timetable",
                                                    "arguments": '{"from": "Lyon", "to": "Genève", "day": 3}'}
    assert rows[3]["tool_call_id"] == "call_a"


async def test_rows_from_other_writers_read_back_as_messages(store: SessionDB) -> None:
    history = HermesChatMessageHistory("shared", store)
    await history.aadd_messages([HumanMessage("hi", id="x")])
    calls = [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}]
    await store.append_message("shared", "assistant", "looking", tool_calls=calls)
    await store.append_message("shared", "tool", "found", tool_call_id="c1", tool_name="lookup")
    await store.append_message("shared", "system", "be brief")
    got = await history.aget_messages()
    assert got[0] == HumanMessage("hi", id="x")
    assert isinstance(got[1], AIMessage) and got[1].tool_calls == [
        {"name": "lookup", "args": {"q": 1}, "id": "c1", "type": "tool_call"}
    ]
    assert got[2] == ToolMessage("found", tool_call_id="c1", name="lookup")
    assert got[3] == SystemMessage("be brief")


async def test_bad_input_fails_at_the_call_site(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    await history.aadd_messages([HumanMessage("kept")])
    with pytest.raises(TypeError, match="sequence of BaseMessage"):
        await history.aadd_messages(HumanMessage("x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        await history.aadd_messages([HumanMessage("x"), {"role": "user"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"messages\[0\].*JSON"):
        await history.aadd_messages([HumanMessage("x", additional_kwargs={"handle": object()})])
    with pytest.raises(TypeError, match="session_db"):
        HermesChatMessageHistory("chat", None)
    with pytest.raises(TypeError, match="loop"):
        HermesChatMessageHistory("chat", store, loop="main")  # type: ignore[arg-type]
    assert await history.aget_messages() == [HumanMessage("kept")]


# ------------------------------------------------------------- the sync methods


async def test_sync_methods_work_from_a_worker_thread(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    await history.aget_messages()  # binds the store to this loop

    def sync_host() -> list[BaseMessage]:
        history.add_user_message("from a thread")
        history.add_ai_message(AIMessage("answer", id="a-9"))
        history.add_messages(conversation())
        return history.messages

    got = await asyncio.to_thread(sync_host)
    assert_same(got, [HumanMessage("from a thread"), AIMessage("answer", id="a-9"), *conversation()])


async def test_a_closed_store_refuses_even_an_empty_add(db_path) -> None:  # type: ignore[no-untyped-def]
    db = SessionDB(db_path)
    history = HermesChatMessageHistory("chat", db)
    await history.aadd_messages([])
    await db.close()
    with pytest.raises(StoreClosedError):
        await history.aadd_messages([])


async def test_sync_methods_refuse_to_block_the_stores_own_loop(store: SessionDB) -> None:
    history = HermesChatMessageHistory("chat", store)
    await history.aget_messages()
    with pytest.raises(RuntimeError, match=r"event loop the store runs on.*deadlock.*await history\.aadd_messages"):
        history.add_user_message("would deadlock")
    with pytest.raises(RuntimeError, match=r"deadlock.*await history\.aget_messages"):
        history.messages  # noqa: B018
    assert await history.aget_messages() == []


async def test_sync_methods_inside_a_running_loop_before_the_store_has_one(store: SessionDB) -> None:
    """An async caller of a sync method on an unused store: no background loop that would steal the store."""
    history = HermesChatMessageHistory("chat", store)
    with pytest.raises(RuntimeError, match=r"a running event loop.*await history\.aclear"):
        history.clear()
    assert store.loop is None
    await history.aadd_messages([HumanMessage("async still works")])
    assert await history.aget_messages() == [HumanMessage("async still works")]


def test_sync_methods_with_a_loop_thread_of_the_hosts(db_path) -> None:  # type: ignore[no-untyped-def]
    with LoopThread() as background:
        db = SessionDB(db_path)
        history = HermesChatMessageHistory("chat", db, loop=background.loop)
        history.add_messages(conversation())
        assert threading.current_thread() is threading.main_thread()
        assert_same(history.messages, conversation())
        assert_same(HermesChatMessageHistory("chat", db).messages, conversation())  # the store is bound now
        history.clear()
        assert history.messages == []
        history.add_user_message("after clear")
        background.run(db.close())
        with pytest.raises(StoreClosedError):
            history.messages  # noqa: B018
    db = SessionDB(db_path)
    try:
        assert HermesChatMessageHistory("chat", db).messages == [HumanMessage("after clear")]
    finally:
        close_store(db)


def store_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hermes-state-store-loop"]


def test_a_store_used_from_sync_code_gets_a_loop_that_stops_when_it_closes(db_path) -> None:  # type: ignore[no-untyped-def]
    before = store_threads()
    db = SessionDB(db_path)
    history = HermesChatMessageHistory("chat", db)
    history.add_user_message("hi")
    [started] = [t for t in store_threads() if t not in before]
    assert db.loop is not None and HermesChatMessageHistory("other", db).messages == []  # the same loop thread serves both
    assert [t for t in store_threads() if t not in before] == [started]
    # Closed through the loop itself (not close_store): the thread notices and stops.
    asyncio.run_coroutine_threadsafe(db.close(), db.loop).result(timeout=30)
    started.join(timeout=10)
    assert not started.is_alive()
    with pytest.raises(StoreClosedError):
        history.add_user_message("too late")


WAL_BUG_NOTICE = "SQLite is affected by the WAL-reset bug; using a rollback journal for state.db\n"

# A plain synchronous program: no asyncio import, no loop, no LoopThread.
PLAIN_SCRIPT = """
import json, sys, threading
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from hermes_state.integrations.langchain import HermesChatMessageHistory
from hermes_state.integrations.loop_thread import close_store

backend, target, close = sys.argv[1:]
if backend == "postgres":
    from hermes_state.postgres import SessionDB
else:
    from hermes_state import SessionDB
db = SessionDB(target)
history = HermesChatMessageHistory("chat", db)
history.add_user_message("Lyon to Geneve?")
history.add_messages([AIMessage("", id="a1", tool_calls=[{"name": "trains", "args": {"day": 3}, "id": "c1"}]),
                      ToolMessage("08:04", tool_call_id="c1", id="t1")])
first = [type(m).__name__ for m in history.messages]
other = HermesChatMessageHistory("other", db)
other.add_user_message("a second history on the same store")
other.clear()
loops = [t.name for t in threading.enumerate() if t.name == "hermes-state-store-loop"]
history.add_ai_message(AIMessage("The 08:04.", id="a2"))
result = {"first": first, "last": history.messages[-1].content, "loops": loops, "main": threading.current_thread().name}
if close == "close":
    close_store(db)
    result["after_close"] = [t.name for t in threading.enumerate() if t.name == "hermes-state-store-loop"]
print(json.dumps(result))
"""


@pytest.mark.parametrize("close", ["close", "exit"])
async def test_the_sync_methods_in_a_plain_script(store: SessionDB, tmp_path, close: str) -> None:  # type: ignore[no-untyped-def]
    """The whole sync path in a fresh process that never creates a loop; ``exit``: the store is left open."""
    backend = "postgres" if is_postgres(store) else "sqlite"
    target = store_target(store)
    if backend == "sqlite":
        target = str(tmp_path / "plain" / "state.db")
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", PLAIN_SCRIPT, backend, target, close],
        capture_output=True, text=True, env=cli_env(tmp_path), cwd=str(tmp_path), timeout=120,
    )
    # Nothing on stderr but, with a SQLite that has the WAL-reset bug, the store's notice of its journal.
    assert done.returncode == 0 and done.stderr.replace(WAL_BUG_NOTICE, "") == "", done.stderr
    result = json.loads(done.stdout)
    assert result["first"] == ["HumanMessage", "AIMessage", "ToolMessage"]
    assert result["last"] == "The 08:04." and result["main"] == "MainThread"
    assert result["loops"] == ["hermes-state-store-loop"]  # one background loop, for both histories
    if close == "close":
        assert result["after_close"] == []
    reopened = type(store)(target)
    try:
        assert [m.content for m in await HermesChatMessageHistory("chat", reopened).aget_messages()] == [
            "Lyon to Geneve?", "", "08:04", "The 08:04.",
        ]
    finally:
        await reopened.close()
    if backend == "sqlite":  # closed at exit too: checkpointed, no -wal left behind
        assert not Path(f"{target}-wal").exists()


async def test_sync_and_async_paths_mixed_on_one_store(store: SessionDB) -> None:
    """Async calls on the test's loop, sync calls from worker threads, interleaved: every message lands in order."""
    history = HermesChatMessageHistory("mixed", store)
    await history.aadd_messages([HumanMessage("async 1")])
    await asyncio.to_thread(history.add_user_message, "sync 1")  # the store moves to its own loop thread
    await history.aadd_messages([AIMessage("async 2", id="a2")])  # handed to that thread from here
    await asyncio.to_thread(history.add_messages, [HumanMessage("sync 2")])
    assert [m.content for m in await asyncio.to_thread(lambda: history.messages)] == ["async 1", "sync 1", "async 2", "sync 2"]
    assert [m.content for m in await history.aget_messages()] == ["async 1", "sync 1", "async 2", "sync 2"]
    await asyncio.to_thread(history.clear)
    assert await history.aget_messages() == []
