"""Export (in memory and streaming) and all-or-nothing import, including hostile payloads."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, SessionExportTooLargeError
from hermes_state.methods import maintenance
from tests.raw_sql import is_postgres, raw_exec, set_columns


CONTENT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "tool_name", "reasoning", "reasoning_details",
                "platform_message_id", "timestamp", "display_metadata", "api_content")


def same_messages(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return [{k: m[k] for k in CONTENT_KEYS} for m in a] == [{k: m[k] for k in CONTENT_KEYS} for m in b]


async def populate(db: SessionDB) -> None:
    await db.create_session("alpha", "cli", model="m", system_prompt="SYS", cwd="/w", model_config={"k": 1})
    await db.append_message("alpha", "user", "hello ✓ \ud800")
    await db.append_message("alpha", "assistant", None, tool_calls=[{"id": "c1", "function": {"name": "t"}}],
                            reasoning="why", reasoning_details=[{"type": "x"}])
    await db.append_message("alpha", "tool", "result", tool_call_id="c1", tool_name="t", platform_message_id="p1")
    await db.append_message("alpha", "user", [{"type": "text", "text": "multi"}], display_metadata={"a": 1})
    await db.create_session("beta", "tui")
    await db.append_message("beta", "user", "beta words")
    await db.replace_messages("beta", [{"role": "user", "content": "beta v2"}], archive_dropped=True)
    await db.create_session("child", "cli", parent_session_id="alpha")
    await db.append_message("child", "user", "child words")
    await set_columns(db, "beta", archived=1, title="Beta title")
    await db.update_token_counts("alpha", input_tokens=10, output_tokens=5, estimated_cost_usd=0.5)


# -------------------------------------------------------------------- export


async def test_export_session_shape_and_limits(store: SessionDB, hermes_home: Path) -> None:
    await populate(store)
    exported = await store.export_session("alpha")
    assert exported is not None
    session = await store.get_session("alpha")
    assert {k: v for k, v in exported.items() if k != "messages"} == session
    assert exported["messages"] == await store.get_messages("alpha")
    beta = await store.export_session("beta")
    assert beta is not None and [m["content"] for m in beta["messages"]] == ["beta v2"]  # active rows only
    assert await store.export_session("missing") is None

    assert await store.assert_export_safe("alpha") == 4
    assert await store.assert_export_safe("alpha", max_messages=0) == 4  # 0 disables the check
    with pytest.raises(SessionExportTooLargeError) as info:
        await store.assert_export_safe("alpha", max_messages=3)
    assert (info.value.session_id, info.value.message_count, info.value.limit) == ("alpha", 4, 3)
    assert "safe in-memory export limit is 3" in str(info.value)
    with pytest.raises(ValueError, match="max_messages must be non-negative"):
        await store.assert_export_safe("alpha", max_messages=-1)


async def test_export_limit_comes_from_config(db_path: Path, hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("sessions:\n  max_export_messages: 2\n")
    db = SessionDB(db_path)
    try:
        await populate(db)
        with pytest.raises(SessionExportTooLargeError):
            await db.export_session("alpha")
        with pytest.raises(SessionExportTooLargeError):
            await db.export_all()
        assert (await db.export_session("child") or {})["messages"][0]["content"] == "child words"
        # the JSON Lines export streams and is not limited
        assert await db.export_all_to(db_path.parent / "all.jsonl") == 3
    finally:
        await db.close()


async def test_export_all_order_and_streaming_forms_agree(store: SessionDB, tmp_path: Path) -> None:
    await populate(store)
    await store.append_message("beta", "user", "newest activity", timestamp=time.time() + 50)
    everything = await store.export_all()
    assert [s["id"] for s in everything] == ["beta", "child", "alpha"]  # last activity, newest first
    assert all("last_active" in s and "messages" in s for s in everything)
    assert [s["id"] for s in await store.export_all(source="tui")] == ["beta"]

    streamed = [s async for s in store.iter_export_all()]
    assert sorted(s["id"] for s in streamed) == ["alpha", "beta", "child"]
    by_id = {s["id"]: s for s in everything}
    for session in streamed:
        assert session == by_id[session["id"]]

    target = tmp_path / "out" / "export.jsonl"
    target.parent.mkdir()
    assert await store.export_all_to(target) == 3
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["id"] for line in lines] == [s["id"] for s in streamed]
    for line in lines:
        original = by_id[line["id"]]
        assert line.keys() == original.keys()
        assert same_messages(line["messages"], original["messages"])
    assert sorted(p.name for p in target.parent.iterdir()) == ["export.jsonl"]  # no partial file left
    assert await store.export_all_to(tmp_path / "none.jsonl", source="nothing") == 0
    assert (tmp_path / "none.jsonl").read_text() == ""


async def test_streaming_export_pages_through_many_sessions_and_messages(
    store: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "EXPORT_SESSION_PAGE", 3)
    monkeypatch.setattr(maintenance, "EXPORT_MESSAGE_PAGE", 4)
    for n in range(8):
        await store.create_session(f"s{n}", "cli")
        await set_columns(store, f"s{n}", started_at=1000.0)  # ties: the keyset falls back to the id
        await store.append_messages_batch(f"s{n}", [{"role": "user", "content": f"{n}-{i}"} for i in range(n * 2)])
    streamed = [s async for s in store.iter_export_all()]
    assert [s["id"] for s in streamed] == [f"s{n}" for n in range(7, -1, -1)]
    assert [len(s["messages"]) for s in streamed] == [n * 2 for n in range(7, -1, -1)]
    target = tmp_path / "paged.jsonl"
    assert await store.export_all_to(target) == 8
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [[m["content"] for m in line["messages"]] for line in lines] == [
        [m["content"] for m in s["messages"]] for s in streamed]


async def test_export_lineage(store: SessionDB) -> None:
    await store.create_session("p", "cli")
    await store.append_message("p", "user", "before compression")
    await store.end_session("p", "compression")
    await store.create_session("c", "cli", parent_session_id="p")
    await store.append_message("c", "user", "after compression")
    exported = await store.export_session_lineage("c")
    assert exported is not None
    assert exported["lineage_session_ids"] == ["p", "c"]
    assert exported["id"] == "c" and [s["id"] for s in exported["segments"]] == ["p", "c"]
    assert exported["message_count"] == len(exported["messages"]) == 2
    assert [m["content"] for m in exported["messages"]] == ["before compression", "after compression"]
    assert (await store.export_session_lineage("p") or {})["lineage_session_ids"] == ["p", "c"]
    assert await store.export_session_lineage("missing") is None


# -------------------------------------------------------------------- import


async def test_round_trip_into_a_fresh_store(store: SessionDB, tmp_path: Path) -> None:
    await populate(store)
    exported = await store.export_all()
    other = SessionDB(tmp_path / "other" / "state.db")
    try:
        result = await other.import_sessions(exported)
        assert result["ok"] is True and result["imported"] == 3 and result["detached"] == 0
        assert sorted(result["imported_ids"]) == ["alpha", "beta", "child"]
        for original in exported:
            copy = await other.export_session(original["id"])
            assert copy is not None
            for key in ("source", "model", "model_config", "system_prompt", "cwd", "parent_session_id",
                        "input_tokens", "estimated_cost_usd", "title", "archived", "started_at", "message_count",
                        "tool_call_count"):
                assert copy[key] == original[key], key
            assert same_messages(copy["messages"], original["messages"])
        again = await other.import_sessions(exported)
        assert (again["imported"], again["skipped"]) == (0, 3) and sorted(again["skipped_ids"]) == [
            "alpha", "beta", "child"]
        hits = await other.search_messages("beta")
        assert [h["session_id"] for h in hits] == ["beta"]  # imported rows are indexed like any other
    finally:
        await other.close()


async def test_import_links_parents_and_detaches_missing_or_cyclic(store: SessionDB) -> None:
    await store.create_session("existing-parent", "cli")
    result = await store.import_sessions([
        {"id": "kid", "parent_session_id": "existing-parent", "messages": []},
        {"id": "grandkid", "parent_session_id": "kid"},
        {"id": "orphan", "parent_session_id": "nowhere"},
        {"id": "x", "parent_session_id": "y"},
        {"id": "y", "parent_session_id": "x"},
        {"id": "self", "parent_session_id": "self"},
    ])
    assert result["ok"] and result["imported"] == 6 and result["detached"] == 3
    parents = {s: (await store.get_session(s) or {})["parent_session_id"] for s in result["imported_ids"]}
    # In a loop the first session met is detached (payload order, as the reference does).
    assert parents == {"kid": "existing-parent", "grandkid": "kid", "orphan": None, "x": None, "y": "x",
                       "self": None}


async def test_import_recomputes_counters_and_defaults(store: SessionDB) -> None:
    result = await store.import_sessions([{
        "id": " padded ",
        "message_count": 999,
        "tool_call_count": 999,
        "messages": [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "content": "ok", "timestamp": 5},
        ],
        "last_active": 1, "preview": "ignored", "segments": [], "unknown_key": {"x": 1},
    }])
    assert result["imported_ids"] == ["padded"]
    s = await store.get_session("padded")
    assert s is not None and (s["message_count"], s["tool_call_count"], s["source"]) == (2, 2, "import")
    assert abs(s["started_at"] - time.time()) < 60


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("not an object", "session must be an object"),
        ({"messages": []}, "session id is required"),
        ({"id": 5}, "session id is required"),
        ({"id": "x" * 600}, "at most 512"),
        ({"id": "a", "messages": "hi"}, "messages must be a list"),
        ({"id": "a", "messages": ["hi"]}, "messages[0] must be an object"),
        ({"id": "a", "messages": [{"content": "no role"}]}, "messages[0].role"),
        ({"id": "a", "messages": [{"role": "user", "token_count": "5"}]}, "token_count"),
        ({"id": "a", "messages": [{"role": "user", "timestamp": "yesterday"}]}, "timestamp"),
        ({"id": "a", "messages": [{"role": "user", "tool_name": 7}]}, "tool_name"),
        ({"id": "a", "started_at": "yesterday"}, "started_at must be a number"),
        ({"id": "a", "input_tokens": -1}, "input_tokens must be a non-negative integer"),
        ({"id": "a", "input_tokens": True}, "input_tokens"),
        ({"id": "a", "model": ["m"]}, "model must be a string"),
        ({"id": "a", "model_config": "[1, 2]"}, "model_config must be a JSON object"),
        ({"id": "a", "model_config": "{oops"}, "model_config must be valid JSON"),
        ({"id": "a", "title_source": "robot"}, "title_source"),
        ({"id": "a", "title": "t" * 150}, "Title too long"),
        ({"id": "a", "title": 12}, "title must be a string"),
        ({"id": "a", "notes": "x" * (6 * 1024 * 1024)}, "size limit"),
        ({"id": "a", "deep": json.loads("[" * 100 + "]" * 100)}, "nested"),
        ({"id": "a", "messages": [{"role": "user", "content": float("nan")}]}, "finite"),
        ({"id": "a", "messages": [{}] * 10_001}, "per-session import limit"),
    ],
)
async def test_invalid_entries_write_nothing(store: SessionDB, entry: Any, message: str) -> None:
    result = await store.import_sessions([{"id": "fine", "messages": [{"role": "user", "content": "ok"}]}, entry])
    assert result["ok"] is False and (result["imported"], result["skipped"], result["detached"]) == (0, 0, 0)
    assert len(result["errors"]) == 1 and result["errors"][0]["index"] == 1
    assert message in result["errors"][0]["error"]
    assert await store.get_session("fine") is None


async def test_batch_level_problems(store: SessionDB, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="sessions must be a list"):
        await store.import_sessions({"id": "a"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 500"):
        await store.import_sessions([{"id": f"s{i}"} for i in range(501)])
    dup = await store.import_sessions([{"id": "a"}, {"id": "b"}, {"id": "a"}])
    assert dup["ok"] is False and dup["errors"] == [{"index": 2, "error": "duplicate session id", "session_id": "a"}]
    titles = await store.import_sessions([{"id": "a", "title": "Same"}, {"id": "b", "title": " Same "}])
    assert titles["ok"] is False and "also used by session a" in titles["errors"][0]["error"]
    monkeypatch.setattr(maintenance, "IMPORT_MAX_TOTAL_MESSAGES", 5)
    many = await store.import_sessions([{"id": f"m{i}", "messages": [{"role": "user"}] * 2} for i in range(3)])
    assert many["ok"] is False and "total import limit" in many["errors"][0]["error"]
    monkeypatch.setattr(maintenance, "IMPORT_MAX_TOTAL_BYTES", 3000)
    big = await store.import_sessions([{"id": f"b{i}", "notes": "x" * 1000} for i in range(4)])
    assert big["ok"] is False and "total size limit" in big["errors"][0]["error"]
    assert await store.session_count(include_archived=True) == 0


async def test_title_taken_in_the_database_rolls_everything_back(store: SessionDB) -> None:
    await store.create_session("owner", "cli")
    await set_columns(store, "owner", title="Taken")
    result = await store.import_sessions([
        {"id": "new1", "title": "Free", "messages": [{"role": "user", "content": "x"}]},
        {"id": "new2", "title": "Taken"},
    ])
    assert result["ok"] is False and result["errors"][0]["index"] == 1
    assert "already used by session owner" in result["errors"][0]["error"]
    assert await store.get_session("new1") is None and await store.message_count() == 0


async def test_imported_titles_are_sanitized_like_set_session_title(store: SessionDB) -> None:
    result = await store.import_sessions([
        {"id": "t", "title": "bad\x07title\u202e  spaced\n"},
        {"id": "blank", "title": " \u200b "},
    ])
    assert result["ok"] is True
    assert (await store.get_session("t") or {})["title"] == "badtitle spaced"
    assert (await store.get_session("blank") or {})["title"] is None


async def test_import_is_atomic_when_the_write_fails(store: SessionDB) -> None:
    await store.create_session("warmup", "cli")
    if is_postgres(store):  # the same refusal in each dialect's trigger language
        await raw_exec(store, "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                              "RAISE EXCEPTION 'poisoned row' USING ERRCODE = 'check_violation'; END $$")
        await raw_exec(store, "CREATE TRIGGER refuse_poison BEFORE INSERT ON messages FOR EACH ROW "
                              "WHEN (new.content = 'poison') EXECUTE FUNCTION refuse_poison()")
    else:
        await raw_exec(store, "CREATE TRIGGER refuse_poison BEFORE INSERT ON messages WHEN new.content = 'poison' "
                              "BEGIN SELECT RAISE(ABORT, 'poisoned row'); END")
    with pytest.raises(sqlite3.IntegrityError, match="poisoned row"):
        await store.import_sessions([
            {"id": "ok1", "messages": [{"role": "user", "content": "fine"}]},
            {"id": "ok2", "messages": [{"role": "user", "content": "poison"}]},
        ])
    assert await store.get_session("ok1") is None and await store.message_count() == 0
