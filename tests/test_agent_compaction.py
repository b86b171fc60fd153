"""Context compaction through the store's lease: in place (archive_and_compact) and by rotation (child session)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_agent import AIAgent, ProviderRequest, ScriptedProvider, load_resume_history
from hermes_agent.agent import COMPACTION_PREFIX
from hermes_state import SessionDB

from .test_agent_support import needs, rows

# PostgreSQL: this module's methods are not on that backend yet (issue 11 phase 2); drop the mark when they are.
pytestmark = pytest.mark.backends("sqlite")

LONG = "background detail " * 120  # ~2,000 characters: over the threshold below
THRESHOLD = 300  # estimated tokens


def _provider(*answers: str, summary: Any = "SUMMARY: the user shared background.") -> ScriptedProvider:
    return ScriptedProvider(list(answers), summarizer=summary)


async def _two_turns(agent: AIAgent) -> tuple[dict[str, Any], dict[str, Any]]:
    first = await agent.run_conversation(LONG)
    second = await agent.run_conversation("and now a short question", conversation_history=first["messages"])
    return first, second


@needs("archive_and_compact", "compression/lineage")
async def test_in_place_compaction_archives_and_continues_the_same_session(store: SessionDB) -> None:
    provider = _provider("noted", "short answer", "third answer")
    agent = AIAgent(provider, session_db=store, tools=[], compression_threshold_tokens=THRESHOLD)
    first, second = await _two_turns(agent)
    session_id = agent.session_id

    assert first["compressions"] == 0 and second["compressions"] == 1
    assert second["session_id"] == session_id
    summary_request = next(r for r in provider.requests if r.purpose == "compression")
    assert summary_request.tools == [] and LONG in [m["content"] for m in summary_request.messages]
    # The turn's request after compaction carries the summary, not the archived turn.
    turn_request = provider.requests[-1]
    assert [m["role"] for m in turn_request.messages] == ["system", "assistant", "user"]
    assert turn_request.messages[1]["content"].startswith(COMPACTION_PREFIX)

    summary_text = COMPACTION_PREFIX + "SUMMARY: the user shared background."
    assert await rows(store, session_id) == [
        ("assistant", summary_text), ("user", "and now a short question"), ("assistant", "short answer")]
    everything = await store.get_messages(session_id, include_inactive=True)
    archived = [(m["role"], m["content"]) for m in everything if m["active"] == 0]
    assert archived == [("user", LONG), ("assistant", "noted"), ("user", "and now a short question")]
    assert all(m["compacted"] == 1 for m in everything if m["active"] == 0)
    assert (await store.get_messages(session_id))[0]["display_kind"] == "hidden"
    assert await store.get_compression_lock_holder(session_id) is None  # lease released

    third = await agent.run_conversation("one more", conversation_history=second["messages"])
    assert third["compressions"] == 0
    assert [r for r, _ in await rows(store, session_id)] == ["assistant", "user", "assistant", "user", "assistant"]


@needs("get_resume_conversations", "compression/lineage")
async def test_resume_after_in_place_compaction_sees_the_compacted_transcript(store: SessionDB) -> None:
    agent = AIAgent(_provider("noted", "short answer"), session_db=store, tools=[],
                    compression_threshold_tokens=THRESHOLD)
    await _two_turns(agent)
    await agent.close()

    tip, history = await load_resume_history(store, agent.session_id)
    assert tip == agent.session_id
    assert [m["content"] for m in history][1:] == ["and now a short question", "short answer"]
    provider = _provider("resumed")
    resumed = AIAgent(provider, session_db=store, session_id=tip, tools=[])
    await resumed.run_conversation("continue", conversation_history=history)
    assert resumed.system_prompt == (await store.get_session(tip))["system_prompt"] == agent.system_prompt
    assert [r for r, _ in await rows(store, tip)] == ["assistant", "user", "assistant", "user", "assistant"]


@needs("publish_compression_child", "compression/lineage")
async def test_rotation_publishes_a_child_and_moves_the_agent_there(store: SessionDB) -> None:
    provider = _provider("noted", "short answer", "child answer")
    agent = AIAgent(provider, session_db=store, tools=[], compression_threshold_tokens=THRESHOLD,
                    compression_in_place=False)
    first = await agent.run_conversation(LONG)
    parent = agent.session_id
    if hasattr(store, "set_session_title"):
        await store.set_session_title(parent, "Background talk")
    second = await agent.run_conversation("and now a short question", conversation_history=first["messages"])
    child = agent.session_id

    assert child != parent and second["session_id"] == child
    parent_row, child_row = await store.get_session(parent), await store.get_session(child)
    assert parent_row["end_reason"] == "compression"
    assert child_row["parent_session_id"] == parent and child_row["system_prompt"] == agent.system_prompt
    # The live turn's user row reached the parent before the handoff; the child holds the compacted list.
    assert [r for r, _ in await rows(store, parent)] == ["user", "assistant", "user"]
    assert [c for _, c in await rows(store, child)] == [
        COMPACTION_PREFIX + "SUMMARY: the user shared background.", "and now a short question", "short answer"]
    assert await store.resolve_resume_session_id(parent) == child
    assert await store.get_compression_lock_holder(parent) is None
    if hasattr(store, "get_session_title"):
        assert await store.get_session_title(child) == "Background talk #2"

    third = await agent.run_conversation("next", conversation_history=second["messages"])
    assert third["session_id"] == child
    assert [r for r, _ in await rows(store, child)][-2:] == ["user", "assistant"]
    assert len(await rows(store, parent)) == 3


@needs("find_live_compression_child", "compression/lineage")
async def test_a_stale_agent_adopts_the_live_child(store: SessionDB) -> None:
    rotating = AIAgent(_provider("noted", "short answer"), session_db=store, tools=[],
                       compression_threshold_tokens=THRESHOLD, compression_in_place=False)
    await _two_turns(rotating)
    parent = (await store.get_session(rotating.session_id))["parent_session_id"]

    stale = AIAgent(_provider("from the stale agent"), session_db=store, session_id=parent, tools=[])
    result = await stale.run_conversation("are we still here?")
    assert stale.session_id == rotating.session_id == result["session_id"]
    assert (await rows(store, stale.session_id))[-2:] == [
        ("user", "are we still here?"), ("assistant", "from the stale agent")]
    assert len(await rows(store, parent)) == 3  # nothing appended to the closed parent


async def test_without_a_store_compaction_is_in_memory_only(hermes_home: Path) -> None:
    provider = _provider("noted", "short answer")
    agent = AIAgent(provider, tools=[], compression_threshold_tokens=THRESHOLD)
    _, second = await _two_turns(agent)
    assert second["compressions"] == 1
    assert [m["role"] for m in second["messages"]] == ["assistant", "user", "assistant"]
    assert not (hermes_home / "state.db").exists()


@needs("try_acquire_compression_lock", "compression/lineage")
async def test_cancel_during_the_summary_releases_the_lease_and_keeps_the_transcript(store: SessionDB) -> None:
    entered = asyncio.Event()

    async def hang(request: ProviderRequest) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    agent = AIAgent(_provider("noted", summary=hang), session_db=store, tools=[],
                    compression_threshold_tokens=THRESHOLD)
    first = await agent.run_conversation(LONG)
    task = asyncio.ensure_future(agent.run_conversation("short", conversation_history=first["messages"]))
    await asyncio.wait_for(entered.wait(), 5)
    assert await store.get_compression_lock_holder(agent.session_id) is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.get_compression_lock_holder(agent.session_id) is None
    assert await rows(store, agent.session_id) == [("user", LONG), ("assistant", "noted"), ("user", "short")]
    assert await store.message_count(agent.session_id) == 3  # nothing archived
