"""The session_search tool: discover, scroll, read and browse shapes, clamps, truncation and lineage rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_agent import (
    SESSION_SEARCH_SCHEMA,
    AIAgent,
    ScriptedProvider,
    session_search,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from hermes_state import SessionDB

from .test_agent_support import needs


async def _session(db: SessionDB, session_id: str, lines: list[tuple[str, str]], *, source: str = "cli",
                   parent: str | None = None, model: str = "m") -> list[int]:
    await db.create_session(session_id, source, model=model, parent_session_id=parent)
    return [await db.append_message(session_id, role, content) for role, content in lines]


async def _call(**kwargs: Any) -> dict[str, Any]:
    return json.loads(await session_search(**kwargs))


def _chat(n: int, topic: str = "chatter") -> list[tuple[str, str]]:
    return [("user" if i % 2 == 0 else "assistant", f"{topic} message {i}") for i in range(n)]


def test_schema_lists_the_parameters_and_requires_none() -> None:
    params = SESSION_SEARCH_SCHEMA["parameters"]
    assert set(params["properties"]) == {
        "query", "limit", "sort", "session_id", "around_message_id", "window", "role_filter", "profile"}
    assert params["required"] == []
    assert params["properties"]["sort"]["enum"] == ["newest", "oldest"]


# ------------------------------------------------------------------------- read


async def test_read_returns_a_small_session_whole(store: SessionDB) -> None:
    ids = await _session(store, "small", [("user", "hello \x1b[31mred\x1b[0m"), ("assistant", "hi")])
    out = await _call(db=store, session_id="small")
    assert out["success"] and out["mode"] == "read" and out["truncated"] is False
    assert out["link"] == "@session:default/small"
    assert out["session_meta"]["source"] == "cli" and out["session_meta"]["model"] == "m"
    assert out["message_count"] == 2
    assert out["messages"][0] == {"id": ids[0], "role": "user", "content": "hello red",
                                  "timestamp": out["messages"][0]["timestamp"]}


async def test_read_gives_head_and_tail_of_a_long_session(store: SessionDB) -> None:
    ids = await _session(store, "long", _chat(35))
    out = await _call(db=store, session_id="long")
    assert out["truncated"] is True and out["message_count"] == 35
    assert [m["id"] for m in out["messages"]] == ids[:20] + ids[-10:]
    assert "around_message_id" in out["message"]


async def test_read_of_an_unknown_id_scans_other_profiles(store: SessionDB, hermes_home: Path) -> None:
    missing = await _call(db=store, session_id="nowhere")
    assert missing == {"error": "session_id not found: nowhere", "success": False}

    work = hermes_home / "profiles" / "work"
    work.mkdir(parents=True)
    other = SessionDB(work / "state.db")
    try:
        await _session(other, "work-1", [("user", "work question")])
    finally:
        await other.close()
    found = await _call(db=store, session_id="work-1")
    assert found["success"] and found["profile"] == "work" and found["link"] == "@session:work/work-1"

    linked = await _call(db=store, session_id="@session:work/work-1")
    assert linked["success"] and linked["messages"][0]["content"] == "work question"
    assert (await _call(db=store, session_id="work-1", profile="work"))["success"]
    assert "does not exist" in (await _call(db=store, session_id="x", profile="ghost"))["error"]
    assert "invalid profile name" in (await _call(db=store, session_id="x", profile="../etc"))["error"]
    assert not store.closed  # a store passed in is never closed by the tool


# ----------------------------------------------------------------------- scroll


@needs("get_messages_around", "listing")
async def test_scroll_returns_a_window_around_the_anchor(store: SessionDB) -> None:
    ids = await _session(store, "scroll", _chat(15))
    out = await _call(db=store, session_id="scroll", around_message_id=ids[7], window=3)
    assert out["success"] and out["mode"] == "scroll" and out["window"] == 3
    assert [m["id"] for m in out["messages"]] == ids[4:11]
    assert [m.get("anchor") for m in out["messages"]].count(True) == 1 and out["messages"][3]["anchor"]
    assert (out["messages_before"], out["messages_after"]) == (3, 3)
    assert out["session_meta"]["source"] == "cli"

    assert (await _call(db=store, session_id="scroll", around_message_id=ids[7], window=500))["window"] == 20
    assert len((await _call(db=store, session_id="scroll", around_message_id=ids[7], window=0))["messages"]) == 3
    assert "integer" in (await _call(db=store, session_id="scroll", around_message_id="seven"))["error"]
    other = await _session(store, "elsewhere", [("user", "x")])
    assert "not in session_id" in (await _call(db=store, session_id="scroll", around_message_id=other[0]))["error"]
    assert "not found" in (await _call(db=store, session_id="nope", around_message_id=ids[0]))["error"]


async def test_scroll_refuses_the_live_current_lineage(store: SessionDB) -> None:
    ids = await _session(store, "current", _chat(4))
    out = await _call(db=store, session_id="current", around_message_id=ids[1], current_session_id="current")
    assert out["success"] is False and "current session lineage" in out["error"]


@needs("archive_and_compact", "compression/lineage")
@needs("get_messages_around", "listing")
@pytest.mark.backends("sqlite")  # archive_and_compact not on PostgreSQL yet (pgA, issue 11 phase 2)
async def test_scroll_allows_compacted_history_of_the_current_session(store: SessionDB) -> None:
    ids = await _session(store, "current", _chat(6))
    await store.archive_and_compact("current", [{"role": "assistant", "content": "summary"}])
    out = await _call(db=store, session_id="current", around_message_id=ids[2], window=1,
                      current_session_id="current")
    assert out["success"] and [m["id"] for m in out["messages"]] == ids[1:4]


@needs("publish_compression_child", "compression/lineage")
@needs("get_messages_around", "listing")
@pytest.mark.backends("sqlite")  # compression locks not on PostgreSQL yet (pgA, issue 11 phase 2)
async def test_scroll_rebinds_an_anchor_that_lives_in_a_compression_child(store: SessionDB) -> None:
    await _session(store, "root", _chat(2))
    holder = "pid=1:task=t:agent=a:nonce=n"
    assert await store.try_acquire_compression_lock("root", holder, 60)
    await store.publish_compression_child(parent_session_id="root", child_session_id="kid", source="cli",
                                          messages=[{"role": "assistant", "content": "summary"}],
                                          compression_lock_holder=holder)
    kid_ids = [await store.append_message("kid", "user", f"kid {i}") for i in range(3)]
    out = await _call(db=store, session_id="root", around_message_id=kid_ids[1], window=1)
    assert out["success"] and out["session_id"] == "kid"
    assert "lives in kid" in out["warning"]
    assert [m["content"] for m in out["messages"]] == ["kid 0", "kid 1", "kid 2"]


# ----------------------------------------------------------------------- browse


@needs("list_sessions_rich", "listing")
async def test_browse_lists_recent_sessions_without_hidden_child_or_current_ones(store: SessionDB) -> None:
    await _session(store, "alpha", [("user", "alpha topic")])
    await _session(store, "beta", [("user", "beta topic")], source="telegram")
    await _session(store, "tooling", [("user", "hidden")], source="tool")
    await _session(store, "delegate", [("user", "child work")], parent="alpha", source="cli")
    await _session(store, "me", [("user", "current")])
    out = await _call(db=store, current_session_id="me", limit=10)
    assert out["success"] and out["mode"] == "browse"
    assert {r["session_id"] for r in out["results"]} == {"alpha", "beta"}
    row = next(r for r in out["results"] if r["session_id"] == "beta")
    assert set(row) == {"session_id", "link", "title", "source", "started_at", "last_active", "message_count",
                        "preview"}
    assert row["source"] == "telegram" and row["message_count"] == 1 and row["preview"] == "beta topic"
    assert row["link"] == "@session:default/beta"
    assert out["count"] == 2


@needs("list_sessions_rich", "listing")
async def test_browse_clamps_limit(store: SessionDB) -> None:
    for i in range(13):
        await _session(store, f"s{i:02d}", [("user", f"session {i}")])
    assert (await _call(db=store, limit=0))["count"] == 1
    assert (await _call(db=store, limit=99))["count"] == 10
    assert (await _call(db=store, limit="junk"))["count"] == 3
    assert (await _call(db=store))["count"] == 3


# --------------------------------------------------------------------- discover


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
async def test_discover_returns_one_result_per_lineage_with_window_and_bookends(store: SessionDB) -> None:
    lines = [("user", "kickoff about deployment"), ("assistant", "sure")] + _chat(8, "filler") + [
        ("user", "the kubernetes upgrade failed"), ("assistant", "roll back the kubernetes cluster")
    ] + _chat(8, "later") + [("user", "wrap up"), ("assistant", "done")]
    ids = await _session(store, "ops", lines)
    await _session(store, "other", [("user", "unrelated cooking talk")])
    out = await _call(db=store, query="kubernetes")
    assert out["success"] and out["mode"] == "discover" and out["query"] == "kubernetes"
    assert out["count"] == 1 and out["sessions_searched"] == 1
    (hit,) = out["results"]
    assert hit["session_id"] == "ops" and hit["link"] == "@session:default/ops"
    assert hit["matched_role"] in ("user", "assistant") and hit["match_message_id"] in ids[10:12]
    assert ">>>kubernetes<<<" in hit["snippet"]
    assert any(m.get("anchor") for m in hit["messages"])
    assert len(hit["messages"]) <= 11
    assert [m["content"] for m in hit["bookend_start"]][:1] == ["kickoff about deployment"]
    assert [m["content"] for m in hit["bookend_end"]][-1:] == ["done"]
    assert {"when", "source", "model", "title", "messages_before", "messages_after"} <= set(hit)


@needs("search_messages", "search")
async def test_discover_with_no_hits(store: SessionDB) -> None:
    await _session(store, "a", [("user", "apples")])
    out = await _call(db=store, query="zeppelin")
    assert out == {"success": True, "mode": "discover", "query": "zeppelin", "results": [], "count": 0,
                   "message": "No matching sessions found."}


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
async def test_discover_skips_live_current_lineage_hidden_sources_and_demotes_cron(store: SessionDB) -> None:
    await _session(store, "me", [("user", "walrus facts please")])
    await _session(store, "mine-child", [("user", "walrus again")], parent="me")
    await _session(store, "robot", [("user", "walrus walrus walrus walrus")], source="cron")
    await _session(store, "secret", [("user", "walrus")], source="subagent")
    await _session(store, "human", [("user", "a walrus story")])
    out = await _call(db=store, query="walrus", current_session_id="me", limit=10)
    assert [r["session_id"] for r in out["results"]] == ["human", "robot"]


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
@pytest.mark.backends("sqlite")  # compression locks not on PostgreSQL yet (pgA, issue 11 phase 2)
async def test_discover_dedupes_a_compression_lineage_and_shows_the_root(store: SessionDB) -> None:
    await _session(store, "root", [("user", "penguin plans"), ("assistant", "ok")])
    holder = "pid=1:task=t:agent=a:nonce=n"
    assert await store.try_acquire_compression_lock("root", holder, 60)
    await store.publish_compression_child(parent_session_id="root", child_session_id="tip", source="cli",
                                          messages=[{"role": "assistant", "content": "summary of penguin plans"}],
                                          compression_lock_holder=holder)
    await store.append_message("tip", "user", "more penguin plans")
    out = await _call(db=store, query="penguin", limit=5)
    assert out["count"] == 1
    (hit,) = out["results"]
    if hit["session_id"] != "root":
        assert hit["parent_session_id"] == "root"


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
@pytest.mark.backends("sqlite")  # archive_and_compact not on PostgreSQL yet (pgA, issue 11 phase 2)
async def test_discover_finds_compacted_history_of_the_current_session(store: SessionDB) -> None:
    await _session(store, "me", [("user", "the password hint is albatross"), ("assistant", "noted")])
    await store.archive_and_compact("me", [{"role": "assistant", "content": "summary without the hint"}])
    await store.append_message("me", "user", "albatross live mention")
    out = await _call(db=store, query="albatross", current_session_id="me")
    assert out["count"] == 1
    assert out["results"][0]["snippet"].count("albatross") == 1
    assert "password hint" in out["results"][0]["snippet"]


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
async def test_discover_truncates_long_content_and_drops_compaction_bookends(store: SessionDB) -> None:
    lines = [("assistant", "[CONTEXT COMPACTION] Summary of the earlier conversation: zzz"),
             ("user", "opening " + "o" * 3000)] + _chat(12) + [("user", "needle " + "n" * 5000)] + _chat(12)
    await _session(store, "big", lines)
    (hit,) = (await _call(db=store, query="needle"))["results"]
    anchor = next(m for m in hit["messages"] if m.get("anchor"))
    assert anchor["content_truncated"] is True and anchor["original_content_chars"] == 5007
    assert len(anchor["content"]) == 4001 and anchor["content"].endswith("…")
    assert all(not m["content"].startswith("[CONTEXT COMPACTION") for m in hit["bookend_start"])
    opening = next(m for m in hit["bookend_start"] if m["content"].startswith("opening"))
    assert len(opening["content"]) == 1201 and opening["original_content_chars"] == 3008


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
async def test_discover_role_filter_sort_and_limit_clamp(store: SessionDB) -> None:
    for i in range(12):
        await _session(store, f"t{i:02d}", [("user", f"otter {i}"), ("assistant", "the otter reply")])
    await _session(store, "toolish", [("user", "hi")])
    await store.append_message("toolish", "tool", "otter from a tool", tool_name="lookup")
    assert (await _call(db=store, query="otter", limit=50))["count"] == 10
    assert (await _call(db=store, query="otter", limit=-4))["count"] == 1
    newest = await _call(db=store, query="otter", sort="newest", limit=2)
    assert [r["session_id"] for r in newest["results"]] == ["t11", "t10"]
    oldest = await _call(db=store, query="otter", sort="OLDEST", limit=2)
    assert [r["session_id"] for r in oldest["results"]] == ["t00", "t01"]
    tools_only = await _call(db=store, query="otter", role_filter="tool", limit=10)
    assert [r["session_id"] for r in tools_only["results"]] == ["toolish"]


@needs("resolve_session_by_title", "titles")
@needs("search_messages", "search")
@pytest.mark.backends("sqlite")  # titles not on PostgreSQL yet (pgA, issue 11 phase 2)
async def test_discover_puts_a_title_match_first(store: SessionDB) -> None:
    await _session(store, "titled", [("user", "we talked about gardens")])
    await store.set_session_title("titled", "Garden plans")
    await _session(store, "mention", [("user", "Garden plans are in the other session")])
    out = await _call(db=store, query="Garden plans", limit=5)
    assert out["results"][0]["session_id"] == "titled"
    assert out["results"][0]["matched_role"] == "session_title"


# ------------------------------------------------------------ through the agent


@needs("list_sessions_rich", "listing")
async def test_agent_calls_session_search_with_its_store_and_session(store: SessionDB) -> None:
    await _session(store, "earlier", [("user", "an earlier conversation")])
    provider = ScriptedProvider([
        tool_calls_reply(tool_call("session_search", {"limit": 5}, call_id="s1")),
        text_reply("found it"),
    ])
    agent = AIAgent(provider, session_db=store)
    result = await agent.run_conversation("what did we do before?")
    browse = json.loads(result["messages"][2]["content"])
    assert browse["mode"] == "browse"
    assert [r["session_id"] for r in browse["results"]] == ["earlier"]  # its own session is skipped
    assert "session_search" in agent.system_prompt
    assert not agent.owns_session_db


async def test_tool_without_a_store_opens_and_closes_the_default_one(hermes_home: Path) -> None:
    default = SessionDB(hermes_home / "state.db")
    try:
        await _session(default, "stored", [("user", "in the default store")])
    finally:
        await default.close()
    out = await _call(session_id="stored")
    assert out["success"] and out["messages"][0]["content"] == "in the default store"


@pytest.mark.parametrize("value", ["", "   "])
async def test_blank_query_browses(store: SessionDB, value: str) -> None:
    if not hasattr(SessionDB, "list_sessions_rich"):
        pytest.xfail("needs SessionDB.list_sessions_rich (listing issue)")
    assert (await _call(db=store, query=value))["mode"] == "browse"
