"""Every core method: return shapes, semantics and errors, on real database files."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import msgspec
import pytest

from hermes_state import (
    CompressionSessionClosedError,
    SessionDB,
    SessionNotFoundError,
    StoreClosedError,
)
from hermes_state.commands import AnyCommand, AppendMessages, SetMeta
from hermes_state.encoding import encode_message_dicts


# ----------------------------------------------------------------- the README example


async def test_issue_example_works_as_written(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "srv" / "my-agent" / "state.db")

    async def inspect_session():
        try:
            await db.create_session("conversation-1", source="api", model="example-model")
            await db.append_message("conversation-1", "user", "Hello")
            await db.append_message("conversation-1", "assistant", "Hi")
            return await db.get_session("conversation-1"), await db.get_messages("conversation-1")
        finally:
            await db.close()

    session, messages = await inspect_session()
    assert session is not None
    assert session["source"] == "api" and session["model"] == "example-model"
    assert session["message_count"] == 2
    assert [(m["role"], m["content"]) for m in messages] == [("user", "Hello"), ("assistant", "Hi")]
    assert db.closed


def test_constructor_does_no_io(tmp_path: Path, hermes_home: Path) -> None:
    target = tmp_path / "never" / "made" / "state.db"
    db = SessionDB(target)
    assert db.db_path == target and db.read_only is False
    assert not target.parent.exists()
    default = SessionDB()
    assert default.db_path == hermes_home / "state.db"
    assert not (hermes_home / "state.db").exists()


@pytest.mark.backends("sqlite")  # reads the SQLite file; PostgreSQL twin in test_postgres_core.py
async def test_lazy_open_creates_schema_and_reports_storage(store: SessionDB) -> None:
    assert not store.db_path.exists()
    info = await store.storage_info()
    assert store.db_path.exists()
    assert info["schema_version"] == 25
    assert info["journal_mode"] in ("wal", "delete")
    assert info["driver"] in ("pysqlite3", "sqlite3")
    with sqlite3.connect(store.db_path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for name in ("sessions", "messages", "messages_fts", "messages_fts_trigram", "state_meta",
                 "messages_fts_insert", "messages_fts_trigram_update", "idx_sessions_title_unique"):
        assert name in names


# ------------------------------------------------------------------------ sessions


async def test_create_session_upsert_is_fill_only(store: SessionDB) -> None:
    assert await store.create_session("s1", "cli", model=None, user_id="u1", cwd="/a") == "s1"
    first = await store.get_session("s1")
    assert first is not None
    await store.create_session("s1", "telegram", model="m2", user_id="u2", cwd="/b", chat_id="c9")
    second = await store.get_session("s1")
    assert second is not None
    assert second["source"] == "cli"  # never changed
    assert second["user_id"] == "u1"  # never changed
    assert second["started_at"] == first["started_at"]
    assert second["model"] == "m2"  # was NULL, filled
    assert second["cwd"] == "/a"  # stored value wins
    assert second["chat_id"] == "c9"


@pytest.mark.backends("sqlite")  # reads the SQLite file; PostgreSQL twin in test_postgres_core.py
async def test_create_session_prompt_is_deduplicated_and_collected(store: SessionDB) -> None:
    await store.create_session("a", "cli", system_prompt="SYS")
    await store.create_session("b", "cli", system_prompt="SYS")
    a = await store.get_session("a")
    assert a is not None
    assert a["system_prompt"] == "SYS"
    assert a["system_prompt_hash"] == "96bf182b2c5d7516a2d884a8250f79221400f455a5063eba48e7e786cd5e19ac"
    await store.update_system_prompt("a", "other prompt ✓")
    await store.update_system_prompt("b", None)
    with sqlite3.connect(store.db_path) as conn:
        prompts = dict(conn.execute("SELECT hash, prompt FROM system_prompts").fetchall())
    assert prompts == {hashlib.sha256("other prompt ✓".encode()).hexdigest(): "other prompt ✓"}
    b = await store.get_session("b")
    assert b is not None and b["system_prompt"] is None and b["system_prompt_hash"] is None


async def test_create_session_model_config_and_reset_marker(store: SessionDB) -> None:
    await store.create_session("s", "cli", model_config={"a": 1})
    await store.create_session("s", "cli", model_config={"a": 2})
    s = await store.get_session("s")
    assert s is not None and s["model_config"] == json.dumps({"a": 1})
    await store.update_session_meta("s", json.dumps({"_reset_from": "p"}))
    await store.create_session("s", "cli", model_config={"max_iterations": 5})
    s = await store.get_session("s")
    assert s is not None and json.loads(s["model_config"]) == {"max_iterations": 5, "_reset_from": "p"}


async def test_child_inherits_from_parent(store: SessionDB) -> None:
    await store.create_session("p", "cli", cwd="/w", profile_name="prof", user_id="u", chat_id="c")
    await store.create_session("c1", "cli", parent_session_id="p")
    c1 = await store.get_session("c1")
    assert c1 is not None
    assert (c1["cwd"], c1["profile_name"], c1["user_id"], c1["chat_id"]) == ("/w", "prof", None, None)
    await store.end_session("p", "compression")
    await store.create_session("c2", "cli", parent_session_id="p")
    c2 = await store.get_session("c2")
    assert c2 is not None and (c2["user_id"], c2["chat_id"]) == ("u", "c")


async def test_create_session_errors(store: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        await store.create_session("child", "cli", parent_session_id="missing")
    assert await store.get_session("child") is None
    with pytest.raises(TypeError, match="unexpected keyword"):
        await store.create_session("x", "cli", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="session_id must be a str"):
        await store.create_session(123, "cli")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        await store.create_session("   ", "cli")
    with pytest.raises(TypeError, match="model_config"):
        await store.create_session("x", "cli", model_config={"bad": object()})
    assert await store.get_session("x") is None


async def test_ensure_session_defaults_and_keeps_source(store: SessionDB) -> None:
    assert await store.ensure_session("e") == "e"
    e = await store.get_session("e")
    assert e is not None and e["source"] == "unknown"
    await store.ensure_session("e", "cli", "model-x")
    e = await store.get_session("e")
    assert e is not None and e["source"] == "unknown" and e["model"] == "model-x"


async def test_end_and_reopen_session(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.end_session("s", "user_exit")
    await store.end_session("s", "agent_close")
    s = await store.get_session("s")
    assert s is not None and s["end_reason"] == "user_exit" and s["ended_at"] is not None
    await store.reopen_session("s")
    s = await store.get_session("s")
    assert s is not None and s["end_reason"] is None and s["ended_at"] is None
    await store.end_session("unknown", "x")  # no-op
    await store.reopen_session("unknown")  # no-op


async def test_reopen_tags_legacy_reset_children(store: SessionDB) -> None:
    await store.create_session("p", "telegram", session_key="k")
    await store.end_session("p", "session_reset")
    await store.create_session("c", "telegram", session_key="k", parent_session_id="p")
    await store.reopen_session("p")
    c = await store.get_session("c")
    assert c is not None and json.loads(c["model_config"]) == {"_reset_from": "p"}


@pytest.mark.backends("sqlite")  # reads the SQLite file; PostgreSQL twin in test_postgres_core.py
async def test_delete_session_with_delegates(store: SessionDB, tmp_path: Path) -> None:
    await store.create_session("root", "cli", system_prompt="only-root")
    await store.create_session("sub", "tool", parent_session_id="root", model_config={"_delegate_from": "root"})
    await store.create_session("branch", "cli", parent_session_id="root", model_config={"_branched_from": "root"})
    await store.append_message("root", "user", "hi")
    await store.append_message("sub", "user", "delegate work")
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    (sessions_dir / "root.json").write_text("{}")
    (sessions_dir / "request_dump_sub_1.json").write_text("{}")
    assert await store.delete_session("root", expected_delete_ids=["root"]) is False  # mismatch
    assert await store.get_session("root") is not None
    assert await store.delete_session("root", sessions_dir=sessions_dir, expected_delete_ids=["root", "sub"])
    assert await store.get_session("root") is None
    assert await store.get_session("sub") is None
    branch = await store.get_session("branch")
    assert branch is not None and branch["parent_session_id"] is None
    assert await store.message_count() == 0
    assert list(sessions_dir.iterdir()) == []
    assert await store.delete_session("root") is False
    with sqlite3.connect(store.db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM system_prompts").fetchone()[0] == 0


async def test_update_session_meta_and_model(store: SessionDB) -> None:
    await store.create_session("s", "cli", model="m1", system_prompt="P",
                               model_config={"browser_model_lock": {"x": 1}, "q": 2})
    await store.update_session_model("s", "m2")
    s = await store.get_session("s")
    assert s is not None
    assert s["model"] == "m2" and s["model_config"] == '{"q":2}'
    assert s["system_prompt"] is None and s["system_prompt_hash"] is None
    await store.update_session_meta("s", '{"raw": true}')
    s = await store.get_session("s")
    assert s is not None and s["model_config"] == '{"raw": true}' and s["model"] == "m2"
    await store.update_session_meta("s", "{}", model="m3")
    s = await store.get_session("s")
    assert s is not None and s["model"] == "m3"


# ------------------------------------------------------------------------ messages


@pytest.mark.backends("sqlite")  # reads the SQLite file; PostgreSQL twin in test_postgres_core.py
async def test_append_message_encodings(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,x"}}]
    ids = [
        await store.append_message("s", "user", parts),
        await store.append_message("s", "assistant", None, tool_calls=[{"id": "c1"}, {"id": "c2"}],
                                   reasoning="why", reasoning_details=[{"k": 1}], finish_reason="tool_calls"),
        await store.append_message("s", "tool", "bad \ud800 surrogate", tool_call_id="c1", tool_name="t"),
        await store.append_message("s", "assistant", "ok", tool_calls=[], display_metadata={"a": "b"},
                                   platform_message_id="pm-1", observed=True, timestamp=1234.5),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 4
    rows = await store.get_messages("s")
    assert rows[0]["content"] == parts
    assert rows[1]["tool_calls"] == [{"id": "c1"}, {"id": "c2"}]
    assert rows[1]["reasoning_details"] == '[{"k": 1}]'  # returned as stored JSON text
    assert rows[2]["content"] == "bad \ufffd surrogate"
    assert rows[3]["tool_calls"] is None
    assert rows[3]["display_metadata"] == {"a": "b"}
    assert rows[3]["observed"] == 1 and rows[3]["timestamp"] == 1234.5
    assert list(rows[0]) == [
        "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
        "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
        "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
        "platform_message_id", "observed", "active", "compacted", "api_content", "display_kind",
        "display_metadata",
    ]
    with sqlite3.connect(store.db_path) as conn:
        stored = conn.execute("SELECT content FROM messages WHERE id = ?", (ids[0],)).fetchone()[0]
    assert stored == "\x00json:" + json.dumps(parts)
    s = await store.get_session("s")
    assert s is not None and s["message_count"] == 4 and s["tool_call_count"] == 2


async def test_append_message_errors_write_nothing(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "keep me")
    with pytest.raises(SessionNotFoundError, match="'nope' does not exist"):
        await store.append_message("nope", "user", "x")
    with pytest.raises(TypeError, match="role must be a str"):
        await store.append_message("s", 5, "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot be stored"):
        await store.append_message("s", "user", {"x": object()})
    with pytest.raises(ValueError, match="non-empty"):
        await store.append_message("", "user", "x")
    await store.end_session("s", "compression")
    with pytest.raises(CompressionSessionClosedError, match="closed by compression") as info:
        await store.append_message("s", "user", "late")
    assert info.value.session_id == "s"
    rows = await store.get_messages("s")
    assert [r["content"] for r in rows] == ["keep me"]
    s = await store.get_session("s")
    assert s is not None and s["message_count"] == 1


async def test_append_messages_batch(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    assert await store.append_messages_batch("s", []) == 0
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "tool_calls": '[{"id": "x"}]', "reasoning": "r"},
        {"role": "tool", "content": "t", "reasoning": "dropped for non-assistant", "message_id": 42},
        {"content": "no role"},
    ]
    assert await store.append_messages_batch("s", msgs) == 4
    rows = await store.get_messages("s")
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "unknown"]
    assert rows[1]["reasoning"] == "r" and rows[2]["reasoning"] is None
    assert rows[2]["platform_message_id"] == "42"
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4  # strictly increasing
    s = await store.get_session("s")
    assert s is not None and s["message_count"] == 4 and s["tool_call_count"] == 1
    with pytest.raises(ValueError, match="chunk_rows must be positive"):
        await store.append_messages_batch("s", msgs, chunk_rows=0)
    assert await store.append_messages_batch("s", msgs * 3, chunk_rows=5) == 12
    assert await store.message_count("s") == 16
    with pytest.raises(SessionNotFoundError):
        await store.append_messages_batch("nope", msgs)
    with pytest.raises(TypeError, match=r"messages\[1\] must be a dict"):
        await store.append_messages_batch("s", [{"role": "user"}, "oops"])  # type: ignore[list-item]
    assert await store.message_count("s") == 16


async def test_replace_messages_modes(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_messages_batch("s", [{"role": "user", "content": str(i)} for i in range(3)])
    await store.replace_messages("s", [{"role": "user", "content": "new"}], archive_dropped=True)
    assert [r["content"] for r in await store.get_messages("s")] == ["new"]
    everything = await store.get_messages("s", include_inactive=True)
    assert [(r["content"], r["active"]) for r in everything] == [("0", 0), ("1", 0), ("2", 0), ("new", 1)]
    await store.replace_messages("s", [{"role": "user", "content": "newer"}], active_only=True)
    assert [r["content"] for r in await store.get_messages("s", include_inactive=True)] == ["0", "1", "2", "newer"]
    await store.replace_messages("s", [])
    assert await store.message_count("s") == 0
    s = await store.get_session("s")
    assert s is not None and s["message_count"] == 0
    await store.replace_messages("unknown", [])  # silent no-op
    with pytest.raises(sqlite3.IntegrityError):
        await store.replace_messages("unknown", [{"role": "user", "content": "x"}])
    await store.end_session("s", "compression")
    with pytest.raises(CompressionSessionClosedError):
        await store.replace_messages("s", [{"role": "user", "content": "x"}])


async def test_get_messages_paging(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    ids = [await store.append_message("s", "user", str(i)) for i in range(6)]
    assert [r["id"] for r in await store.get_messages("s", limit=2, latest=True)] == ids[4:]
    assert [r["id"] for r in await store.get_messages("s", limit=2, offset=1)] == ids[1:3]
    assert [r["id"] for r in await store.get_messages("s", offset=4)] == ids[4:]
    assert [r["id"] for r in await store.get_messages("s", after_id=ids[3])] == ids[4:]
    with pytest.raises(ValueError, match="after_id is incompatible"):
        await store.get_messages("s", after_id=1, latest=True)
    with pytest.raises(ValueError, match="after_id is incompatible"):
        await store.get_messages("s", after_id=1, offset=2)
    assert await store.get_messages("unknown") == []


async def test_conversation_with_ancestors(store: SessionDB) -> None:
    await store.create_session("p", "cli")
    await store.append_message("p", "user", "hello")
    await store.append_message("p", "assistant", "hi there")
    await store.end_session("p", "compression")
    await store.create_session("c", "cli", parent_session_id="p")
    await store.append_message("c", "user", "next")
    convo = await store.get_messages_as_conversation("c", include_ancestors=True, include_row_ids=True)
    assert [m["content"] for m in convo] == ["hello", "hi there", "next"]
    assert all("_row_id" in m for m in convo)
    assert await store.get_messages_as_conversation("missing") == []


# --------------------------------------------------------------------- usage, meta


@pytest.mark.backends("sqlite")  # usage handlers on PostgreSQL: not yet (issue 11 phase 2)
async def test_update_token_counts_incremental_and_absolute(store: SessionDB) -> None:
    await store.update_token_counts("auto", input_tokens=10, output_tokens=5, model="m",
                                    billing_provider="prov", estimated_cost_usd=0.5, api_call_count=1)
    s = await store.get_session("auto")
    assert s is not None and s["source"] == "unknown"
    assert (s["input_tokens"], s["output_tokens"], s["api_call_count"]) == (10, 5, 1)
    assert s["estimated_cost_usd"] == 0.5 and s["billing_provider"] == "prov" and s["model"] == "m"
    await store.update_token_counts("auto", input_tokens=1, actual_cost_usd=0.25)
    s = await store.get_session("auto")
    assert s is not None and s["input_tokens"] == 11 and s["actual_cost_usd"] == 0.25
    await store.update_token_counts("auto", input_tokens=3, absolute=True)
    s = await store.get_session("auto")
    assert s is not None
    assert (s["input_tokens"], s["output_tokens"], s["api_call_count"], s["estimated_cost_usd"]) == (3, 0, 0, 0.0)
    with sqlite3.connect(store.db_path) as conn:
        ledger = conn.execute(
            "SELECT model, billing_provider, task, input_tokens, api_call_count FROM session_model_usage"
        ).fetchall()
    assert ledger == [("m", "prov", "", 11, 1)]
    with pytest.raises(TypeError, match="input_tokens must be an int"):
        await store.update_token_counts("auto", input_tokens="5")  # type: ignore[arg-type]


@pytest.mark.backends("sqlite")  # usage handlers on PostgreSQL: not yet (issue 11 phase 2)
async def test_record_auxiliary_usage(store: SessionDB) -> None:
    await store.record_auxiliary_usage("", "title")  # no-op, never opens
    assert not store.db_path.exists()
    await store.record_auxiliary_usage("s", "title", model="small", input_tokens=7, estimated_cost_usd=0.1)
    await store.record_auxiliary_usage("s", "title", model="small", input_tokens=3)
    s = await store.get_session("s")
    assert s is not None and s["input_tokens"] == 0  # aggregates untouched
    with sqlite3.connect(store.db_path) as conn:
        row = conn.execute(
            "SELECT model, task, input_tokens, api_call_count, estimated_cost_usd FROM session_model_usage"
        ).fetchone()
    assert row == ("small", "title", 10, 2, 0.1)


async def test_meta_and_counts(store: SessionDB) -> None:
    assert await store.get_meta("k") is None
    await store.set_meta("k", "v1")
    await store.set_meta("k", "v2")
    assert await store.get_meta("k") == "v2"
    await store.create_session("a", "cli")
    await store.append_message("a", "user", "x")
    assert await store.message_count("a") == 1
    assert await store.message_count() == 1


# ----------------------------------------------------------------------- lifecycle


async def test_closed_store_raises_clear_error(db_path: Path) -> None:
    db = SessionDB(db_path)
    await db.create_session("s", "cli")
    await db.close()
    await db.close()  # idempotent
    for call in (db.get_session("s"), db.append_message("s", "user", "x"), db.message_count(), db.get_meta("k")):
        with pytest.raises(RuntimeError, match="^SessionDB is closed$"):
            await call
    with pytest.raises(StoreClosedError):
        await db.create_session("t", "cli")


async def test_close_of_never_opened_store(db_path: Path) -> None:
    db = SessionDB(db_path)
    await db.close()
    assert not db_path.exists()
    with pytest.raises(StoreClosedError):
        await db.get_session("x")


async def test_read_only_store(db_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        await SessionDB(db_path, read_only=True).get_session("x")
    writer = SessionDB(db_path)
    await writer.create_session("s", "cli")
    await writer.append_message("s", "user", "hello")
    reader = SessionDB(db_path, read_only=True)
    try:
        assert [m["content"] for m in await reader.get_messages("s")] == ["hello"]
        with pytest.raises(sqlite3.OperationalError, match="attempt to write a readonly database"):
            await reader.create_session("t", "cli")
        await writer.append_message("s", "user", "more")
        assert await reader.message_count("s") == 2  # sees the other store's commits
    finally:
        await reader.close()
        await writer.close()


async def test_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(sqlite3.OperationalError, match="is a directory"):
        await SessionDB(tmp_path / "dir.db").get_session("x")


async def test_store_used_as_async_context_manager(db_path: Path) -> None:
    async with SessionDB(db_path) as db:
        await db.create_session("s", "cli")
    assert db.closed


# ------------------------------------------------------------------------ commands


def test_commands_are_frozen_tagged_msgspec_structs() -> None:
    rows = encode_message_dicts([{"role": "user", "content": "hi"}, {"role": "user", "content": b"\x00\x01"}])
    cmd = AppendMessages(session_id="s", rows=rows)
    data = msgspec.msgpack.encode(cmd)
    again = msgspec.msgpack.decode(data, type=AnyCommand)
    assert again == cmd
    assert isinstance(again.rows[1].content, bytes)
    stream = [cmd, SetMeta(key="k", value="v")]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(stream), type=list[AnyCommand]) == stream
    with pytest.raises(AttributeError):
        cmd.session_id = "other"  # type: ignore[misc]
    assert json.loads(msgspec.json.encode(AppendMessages(session_id="s", rows=())))["type"] == "AppendMessages"


async def test_reads_do_not_wait_for_the_writer(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "first")
    big = [{"role": "user", "content": "x" * 200} for _ in range(20000)]
    write = asyncio.ensure_future(store.append_messages_batch("s", big))
    await asyncio.sleep(0.01)
    rows = await store.get_messages("s")
    # The read returned a committed snapshot: either before or after the batch, never a part.
    assert len(rows) in (1, 20001)
    assert await write == 20000


async def test_grouped_appends_get_their_own_ids_and_counts(store: SessionDB) -> None:
    for name in ("a", "b", "c"):
        await store.create_session(name, "cli")
    await store.end_session("b", "compression")
    calls, expected = [], []
    for i in range(30):
        calls.append(store.append_message("a" if i % 2 else "c", "user", f"single {i}"))
        expected.append(("id", f"single {i}"))
        if i % 5 == 0:
            calls.append(store.append_messages_batch("c", [{"role": "user", "content": f"batch {i}.{k}"} for k in range(3)]))
            expected.append(("count", 3))
        if i % 7 == 0:
            calls.append(store.append_message("b", "user", "closed"))
            expected.append(("error", CompressionSessionClosedError))
            calls.append(store.append_message("ghost", "user", "unknown"))
            expected.append(("error", SessionNotFoundError))
    batches_before = store._actor.batches
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert store._actor.batches - batches_before < len(calls)  # they were grouped
    contents = {m["id"]: m["content"] for s in ("a", "c") for m in await store.get_messages(s)}
    for (kind, want), got in zip(expected, results):
        if kind == "id":
            assert contents[got] == want  # each caller got the id of its own row
        elif kind == "count":
            assert got == want
        else:
            assert isinstance(got, want)
    a = await store.get_session("a")
    c = await store.get_session("c")
    assert a is not None and c is not None
    assert a["message_count"] == 15 and c["message_count"] == 15 + 6 * 3
    assert await store.message_count("b") == 0
    batch_rows = [m["id"] for m in await store.get_messages("c") if m["content"].startswith("batch")]
    for start in range(0, len(batch_rows), 3):  # each batch's rows are consecutive
        assert batch_rows[start : start + 3] == list(range(batch_rows[start], batch_rows[start] + 3))
