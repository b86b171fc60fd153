"""Reads a transcript viewer needs: keyset paging backwards, listing filters, children, the usage ledger.

Each runs on both backends; the last part checks what a read-only SQLite
store leaves on disk (nothing it did not find) while it reads live data.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.limits import INT64_MAX


def twin(store: Any, **kwargs: Any) -> Any:
    """Another store on the same database (same backend), e.g. a read-only one."""
    return type(store)(getattr(store, "_dsn", store.db_path), **kwargs)


# ------------------------------------------------------------------ before_id


async def test_before_id_pages_backwards(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    ids = [await store.append_message("s", "user", f"m{i}") for i in range(7)]
    await store.create_session("other", "cli")
    await store.append_message("other", "user", "not this session")
    page = await store.get_messages("s", before_id=ids[5], latest=True, limit=2)
    assert [r["id"] for r in page] == ids[3:5]  # the two just before, oldest first
    assert [r["id"] for r in await store.get_messages("s", before_id=ids[2])] == ids[:2]
    assert [r["id"] for r in await store.get_messages("s", after_id=ids[1], before_id=ids[4])] == ids[2:4]
    assert await store.get_messages("s", before_id=ids[0]) == []
    with pytest.raises(TypeError, match="before_id"):
        await store.get_messages("s", before_id="3")  # type: ignore[arg-type]


async def test_before_id_sees_inactive_rows_only_when_asked(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    old = [await store.append_message("s", "user", f"old {i}") for i in range(3)]
    await store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    tail = await store.append_message("s", "user", "after")
    assert [r["content"] for r in await store.get_messages("s", before_id=tail)] == ["summary"]
    rows = await store.get_messages("s", before_id=tail, include_inactive=True)
    assert [r["id"] for r in rows][:3] == old
    assert [(r["active"], r["compacted"]) for r in rows] == [(0, 1)] * 3 + [(1, 0)]


# --------------------------------------------------------------- listing filters


async def test_listing_filters_pinned_and_start_time(store: SessionDB) -> None:
    for name in ("a", "b", "c", "d"):
        await store.create_session(name, "cli")
        await store.append_message(name, "user", f"hello {name}")
    started = {r["id"]: r["started_at"] for r in await store.list_sessions_rich(limit=10)}
    await store.set_session_pinned("b", True)
    await store.set_session_pinned("d", True)
    assert [r["id"] for r in await store.list_sessions_rich(pinned_only=True)] == ["d", "b"]
    window = await store.list_sessions_rich(started_after=started["b"], started_before=started["d"])
    assert [r["id"] for r in window] == ["c", "b"]  # [after, before)
    both = await store.list_sessions_rich(pinned_only=True, started_after=started["c"], order_by_last_active=True)
    assert [r["id"] for r in both] == ["d"]
    assert await store.list_sessions_rich(started_after=started["d"] + 1) == []
    with pytest.raises(ValueError, match="started_after"):
        await store.list_sessions_rich(started_after=math.nan)
    with pytest.raises(TypeError, match="pinned_only"):
        await store.list_sessions_rich(pinned_only="yes")  # type: ignore[arg-type]


async def test_list_and_count_by_model_tool_cost_and_sorted(store: SessionDB) -> None:
    for name, model, cost, messages in (("a", "m1", 0.5, 1), ("b", "m2", 2.0, 3), ("c", "m1", 0.0, 2), ("d", "m2", 1.0, 0)):
        await store.create_session(name, "cli", model=model)
        for n in range(messages):
            await store.append_message(name, "user", f"{name} {n}")
        if cost:
            await store.update_token_counts(name, input_tokens=10, model=model, estimated_cost_usd=cost)
    await store.append_message("c", "tool", "listing", tool_name="terminal", tool_call_id="t1")
    await store.append_message("a", "tool", "read", tool_name="read_file", tool_call_id="t2")

    async def ids(**kwargs: Any) -> list[str]:
        return [r["id"] for r in await store.list_sessions_rich(**kwargs)]

    assert await ids() == ["d", "c", "b", "a"]
    assert await ids(model="m1") == ["c", "a"]
    assert await ids(tool_name="terminal") == ["c"]
    assert await ids(min_cost=1.0) == ["d", "b"]
    assert await ids(sort="cost") == ["b", "d", "a", "c"]
    assert await ids(sort="messages") == ["c", "b", "a", "d"]  # c: two user rows and a tool row
    assert await ids(sort="cost", model="m2", limit=1, offset=1) == ["d"]
    assert await store.session_count(exclude_children=True, model="m2") == 2
    assert await store.session_count(tool_name="read_file", min_cost=0.1) == 1
    assert await store.session_count(tool_name="nothing") == 0
    await store.set_session_hidden("a", True)
    assert await store.session_count(include_hidden=False) == 3 and await store.session_count() == 4
    with pytest.raises(ValueError, match="sort"):
        await store.list_sessions_rich(sort="price")
    with pytest.raises(ValueError, match="min_cost"):
        await store.session_count(min_cost=math.inf)
    with pytest.raises(TypeError, match="model"):
        await store.list_sessions_rich(model=3)  # type: ignore[arg-type]


# ------------------------------------------------------------------- children


async def test_child_sessions_say_how_they_relate(store: SessionDB) -> None:
    await store.create_session("root", "cli", session_key="k")
    await store.append_message("root", "user", "start")
    await store.create_session("fork", "cli", parent_session_id="root", model_config={"_branched_from": "root"})
    await store.create_session("sub", "cli", parent_session_id="root", model_config={"_delegate_from": "root"})
    await store.create_session("run", "tool", parent_session_id="root")
    await store.create_session("plain", "cli", parent_session_id="root")
    assert await store.try_acquire_compression_lock("root", "me")
    await store.publish_compression_child(
        parent_session_id="root", child_session_id="next", source="cli",
        messages=[{"role": "user", "content": "summary"}], compression_lock_holder="me",
    )
    children = await store.get_child_sessions("root")
    assert [(c["id"], c["relation"]) for c in children] == [
        ("fork", "branch"), ("sub", "delegate"), ("run", "tool"), ("plain", "compression"), ("next", "compression"),
    ]
    assert children[-1]["message_count"] == 1 and children[-1]["source"] == "cli"
    assert set(children[0]) == {"id", "source", "title", "model", "started_at", "ended_at", "end_reason",
                                "message_count", "relation"}
    assert await store.get_child_sessions("next") == []
    assert await store.get_child_sessions("unknown") == []


async def test_reset_and_plain_children(store: SessionDB) -> None:
    await store.create_session("p", "telegram", session_key="chat-1")
    await store.create_session("kept", "telegram", parent_session_id="p")
    await store.end_session("p", "session_reset")
    await store.create_session("r", "telegram", parent_session_id="p", session_key="chat-1")
    assert [(c["id"], c["relation"]) for c in await store.get_child_sessions("p")] == [("kept", "child"), ("r", "reset")]


# ------------------------------------------------------------------ usage ledger


async def test_session_model_usage_rows(store: SessionDB) -> None:
    await store.create_session("s", "cli", model="m1")
    await store.update_token_counts("s", input_tokens=10, output_tokens=5, model="m1", estimated_cost_usd=0.25,
                                    api_call_count=1, billing_provider="p")
    await store.update_token_counts("s", input_tokens=7, model="m2", estimated_cost_usd=0.5, api_call_count=2,
                                    billing_provider="p")
    await store.record_auxiliary_usage("s", "title", model="small", input_tokens=3, estimated_cost_usd=0.01)
    rows = await store.get_session_model_usage("s")
    assert [(r["task"], r["model"]) for r in rows] == [("", "m1"), ("", "m2"), ("title", "small")]
    first = rows[0]
    assert (first["input_tokens"], first["output_tokens"], first["api_call_count"]) == (10, 5, 1)
    assert first["estimated_cost_usd"] == 0.25 and isinstance(first["estimated_cost_usd"], float)
    assert first["billing_provider"] == "p" and first["first_seen"] <= first["last_seen"]
    assert rows[2]["api_call_count"] == 1
    assert await store.get_session_model_usage("unknown") == []


async def test_usage_by_day_sums_per_day_and_model(store: SessionDB) -> None:
    await store.create_session("a", "cli", model="m1")
    await store.update_token_counts("a", input_tokens=10, output_tokens=1, model="m1", estimated_cost_usd=1.0)
    await store.create_session("b", "cli", model="m1")
    await store.update_token_counts("b", input_tokens=5, model="m1", estimated_cost_usd=0.5, actual_cost_usd=0.4)
    await store.record_auxiliary_usage("b", "title", model="small", output_tokens=2)
    # Totals without a ledger row (absolute counts) still count, under the session's model.
    await store.create_session("c", "cli", model="m3")
    await store.update_token_counts("c", input_tokens=4, model="m3", absolute=True)
    await store.create_session("idle", "cli", model="m9")
    rows = await store.usage_by_day()
    day = rows[0]["day"]
    assert len(day) == 10 and all(r["day"] == day for r in rows)
    by_model = {r["model"]: r for r in rows}
    assert sorted(by_model) == ["m1", "m3", "small"]
    m1 = by_model["m1"]
    assert (m1["sessions"], m1["input_tokens"], m1["output_tokens"]) == (2, 15, 1)
    assert m1["estimated_cost_usd"] == 1.5 and m1["actual_cost_usd"] == 0.4
    assert by_model["m3"]["input_tokens"] == 4 and by_model["small"]["output_tokens"] == 2
    started = (await store.get_session("c"))["started_at"]  # type: ignore[index]
    assert [r["model"] for r in await store.usage_by_day(since=started)] == ["m3"]
    assert await store.usage_by_day(until=0) == []
    with pytest.raises(ValueError, match="since"):
        await store.usage_by_day(since=math.inf)


async def test_usage_by_day_saturates_like_the_counters(store: SessionDB) -> None:
    for name in ("x", "y"):
        await store.create_session(name, "cli", model="big")
        await store.update_token_counts(name, input_tokens=INT64_MAX, model="big")
    (row,) = await store.usage_by_day()
    assert row["input_tokens"] == INT64_MAX and row["sessions"] == 2


# ----------------------------------------------------------- read-only and live


async def test_read_only_store_reads_what_others_commit_later(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "first")
    reader = twin(store, read_only=True)
    try:
        assert await reader.message_count("s") == 1
        later = await store.append_message("s", "assistant", "second")
        rows = await reader.get_messages("s", after_id=later - 1)
        assert [r["content"] for r in rows] == ["second"]
    finally:
        await reader.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sidecars(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def _wal_file(path: Path) -> None:
    """Make ``path`` a WAL database before any store opens it.

    A store keeps a file that is already WAL even on a SQLite with the WAL-reset
    bug (where it would pick a rollback journal for a new file), so these tests
    check the read-only store's WAL behaviour on every driver.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode=wal").fetchone()[0] == "wal"
    finally:
        conn.close()
    for name in _sidecars(path):
        (path.parent / name).unlink()


async def _idle_wal_file(path: Path) -> None:
    _wal_file(path)
    async with SessionDB(path) as db:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", json.dumps({"x": 1}))
    assert _sidecars(path) == []  # the last writer checkpointed and removed them


@pytest.mark.backends("sqlite")
async def test_read_only_store_leaves_no_sidecars_it_did_not_find(store: SessionDB, db_path: Path) -> None:
    await store.close()
    await _idle_wal_file(db_path)
    before = _digest(db_path)
    async with SessionDB(db_path, read_only=True) as reader:
        assert await reader.message_count("s") == 1
        assert (await reader.storage_info())["journal_mode"] == "wal"
    assert _sidecars(db_path) == []
    assert _digest(db_path) == before


@pytest.mark.backends("sqlite")
async def test_read_only_store_is_live_and_tidy_while_another_store_writes(store: SessionDB, db_path: Path) -> None:
    await store.close()
    await _idle_wal_file(db_path)
    reader = SessionDB(db_path, read_only=True)
    try:
        assert await reader.message_count("s") == 1  # opened first: this store made the -wal/-shm files
        async with SessionDB(db_path) as writer:
            await writer.append_message("s", "assistant", "written while the reader is open")
            assert await reader.message_count("s") == 2
        # The writer could not remove the files (the reader holds them); the reader's close does.
        assert _sidecars(db_path) != []
    finally:
        await reader.close()
    assert _sidecars(db_path) == []
    async with SessionDB(db_path, read_only=True) as again:  # the writer's row reached the main file
        assert [m["content"] for m in await again.get_messages("s")][-1] == "written while the reader is open"


@pytest.mark.backends("sqlite")
async def test_read_only_store_leaves_files_another_connection_still_uses(store: SessionDB, db_path: Path) -> None:
    _wal_file(db_path)  # the fixture's store has not opened the file yet
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "hello")
    async with SessionDB(db_path, read_only=True) as reader:
        assert await reader.message_count("s") == 1
    assert _sidecars(db_path) == [f"{db_path.name}-shm", f"{db_path.name}-wal"]  # the writer's, still open
    assert await store.append_message("s", "user", "still writing") > 0
