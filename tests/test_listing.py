"""Listing, counting, message navigation and session metadata helpers, on real database files."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, StoreClosedError
from hermes_state.sqlite.driver import driver_module

from tests.raw_sql import fetch_rows, raw_exec, set_columns  # noqa: F401  (other modules import them from here)

SKILL = "[IMPORTANT: The user has invoked the "


async def make(db: SessionDB, session_id: str, started: float, source: str = "cli", **kwargs: Any) -> None:
    await db.create_session(session_id, source, **kwargs)
    await set_columns(db, session_id, started_at=started)


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in rows]


# ---------------------------------------------------------------- visibility


async def test_default_listing_shows_roots_branches_and_resets_not_delegates(store: SessionDB) -> None:
    await make(store, "root", 100)
    await make(store, "branch", 110, parent_session_id="root", model_config={"_branched_from": "root"})
    await make(store, "delegate", 120, parent_session_id="root", model_config={"_delegate_from": "root"})
    await make(store, "plain-child", 130, parent_session_id="root")
    await make(store, "reset", 140, parent_session_id="root", model_config={"_reset_from": "root"})
    await make(store, "orphan-delegate", 150, model_config={"_delegate_from": "__orphaned__"})
    # legacy /branch: the parent ended 'branched' and the child started afterwards
    await make(store, "lb-parent", 160)
    await store.end_session("lb-parent", "branched")
    await set_columns(store, "lb-parent", ended_at=165)
    await make(store, "lb-child", 170, parent_session_id="lb-parent")
    await make(store, "lb-early", 161, parent_session_id="lb-parent")
    # legacy reset: parent ended with a reset reason, same non-empty session_key
    await make(store, "lr-parent", 180, session_key="k1")
    await store.end_session("lr-parent", "idle")
    await make(store, "lr-child", 190, session_key="k1", parent_session_id="lr-parent")
    await make(store, "other-key", 195, session_key="k2", parent_session_id="lr-parent")

    listed = ids(await store.list_sessions_rich(limit=100))
    assert listed == ["lr-child", "lr-parent", "lb-child", "lb-parent", "reset", "branch", "root"]
    everything = ids(await store.list_sessions_rich(limit=100, include_children=True))
    assert len(everything) == 12 and everything[0] == "other-key"
    assert await store.session_count(exclude_children=True) == 7
    assert await store.session_count() == 12


async def test_paging_order_and_row_shape(store: SessionDB) -> None:
    for i in range(7):
        await make(store, f"s{i}", 1000 + i, system_prompt="PROMPT" if i == 3 else None)
    page1 = await store.list_sessions_rich(limit=3)
    page2 = await store.list_sessions_rich(limit=3, offset=3)
    page3 = await store.list_sessions_rich(limit=3, offset=6)
    assert ids(page1 + page2 + page3) == [f"s{i}" for i in range(6, -1, -1)]
    row = next(r for r in page2 if r["id"] == "s3")
    session = await store.get_session("s3")
    assert session is not None
    assert list(row)[: len(session)] == list(session)
    assert list(row)[len(session):] == ["last_active", "preview", "unread"]
    assert row["system_prompt"] == "PROMPT"
    compact = (await store.list_sessions_rich(limit=1, offset=3, compact_rows=True))[0]
    assert "system_prompt" not in compact and "system_prompt_hash" not in compact
    assert compact["id"] == "s3" and compact["preview"] == ""
    assert await store.list_sessions_rich(limit=0) == []


async def test_filters(store: SessionDB) -> None:
    await make(store, "a", 1, source="cli", cwd="/w/proj")
    await make(store, "b", 2, source="tui", cwd="/w/proj/sub")
    await make(store, "c", 3, source="cron", cwd="/w/project2")
    await make(store, "d", 4, source="cli", cwd="C:\\w\\proj\\x", session_key="key-d")
    await make(store, "e", 5, source="cli", cwd="/w/p%j")
    await make(store, "f", 6, source="cli", cwd="/w/pXj")
    for i in range(3):
        await store.append_message("a", "user", f"m{i}")
    await set_columns(store, "f", archived=1)

    async def listed(**kw: Any) -> list[str]:
        return sorted(ids(await store.list_sessions_rich(limit=50, **kw)))

    assert await listed(source="cli") == ["a", "d", "e"]
    assert await listed(source="cli", sources=["tui"]) == ["a", "d", "e"]  # source wins
    assert await listed(sources=["tui", "cron"]) == ["b", "c"]
    assert await listed(sources=[]) == ["a", "b", "c", "d", "e"]  # empty list: no source filter
    assert await listed(exclude_sources=["cli"]) == ["b", "c"]
    assert await listed(session_key="key-d") == ["d"]
    assert await listed(cwd_prefix="/w/proj/") == ["a", "b"]
    assert await listed(cwd_prefix="C:\\w\\proj") == ["d"]
    assert await listed(cwd_prefix="/w/p%j") == ["e"]  # % is literal
    assert await listed(min_message_count=3) == ["a"]
    assert await listed(include_archived=True) == ["a", "b", "c", "d", "e", "f"]
    assert await listed(archived_only=True) == ["f"]
    assert await store.session_count(source="cli") == 3
    assert await store.session_count(cwd_prefix="/w/proj", exclude_sources=["tui"]) == 1
    assert await store.session_count(include_archived=True) == 6
    assert await store.session_count(archived_only=True, sources=["cli"]) == 1


async def test_previews(store: SessionDB) -> None:
    await make(store, "plain", 1)
    await store.append_message("plain", "assistant", "assistant first")
    await store.append_message("plain", "user", "line one\nline two\r\n" + "x" * 80)
    await make(store, "short", 2)
    await store.append_message("short", "user", "  hi  ")
    await make(store, "skill", 3)
    skill_text = (
        SKILL + '"deploy" skill. The full skill content is loaded below.]\n\n' + "body " * 400
        + "\nThe user has provided the following instruction alongside the skill invocation: ship it now"
    )
    await store.append_message("skill", "user", skill_text)
    await make(store, "multi", 4)
    await store.append_message(
        "multi", "user", [{"type": "text", "text": "look at\nthis"}, {"type": "image_url", "image_url": {"url": "x"}}]
    )
    await make(store, "image", 5)
    await store.append_message("image", "user", [{"type": "image_url", "image_url": {"url": "data:" + "A" * 50000}}])
    rows = {r["id"]: r["preview"] for r in await store.list_sessions_rich(limit=10)}
    assert rows["plain"] == ("line one line two  " + "x" * 80)[:60] + "..."
    assert rows["short"] == "hi"
    assert rows["skill"] == "/deploy — ship it now"
    assert rows["multi"] == "look at this"
    assert rows["image"] == "[multimodal content]"


async def test_unread_and_pinned(store: SessionDB) -> None:
    await make(store, "old", 10)
    await make(store, "mid", 20)
    await make(store, "new", 30)
    await set_columns(store, "old", pinned=1, last_read_at=5)
    await set_columns(store, "mid", last_read_at=50)
    rows = await store.list_sessions_rich(limit=1, include_pinned=True)
    assert ids(rows) == ["new", "old"]
    assert [r["unread"] for r in rows] == [False, True]  # never read / moved after reading
    mid = await store.list_sessions_rich(limit=1, offset=1)
    assert mid[0]["unread"] is False
    assert ids(await store.list_sessions_rich(limit=5, include_pinned=True)) == ["new", "mid", "old"]


async def test_order_by_last_active_uses_the_whole_compression_chain(store: SessionDB) -> None:
    await make(store, "p1", 100, model_config={})
    await store.set_meta("x", "y")
    await make(store, "p2", 200)
    await store.end_session("p1", "compression")
    await make(store, "p1-tip", 300, parent_session_id="p1")
    await store.append_message("p1-tip", "user", "fresh", timestamp=time.time() + 100)
    await store.append_message("p2", "user", "older", timestamp=time.time())
    await make(store, "my-project-notes", 50, source="cli")
    await set_columns(store, "my-project-notes", title="My-Project Notes")
    default = ids(await store.list_sessions_rich(limit=10, project_compression_tips=False))
    assert default == ["p2", "p1", "my-project-notes"]
    ranked = await store.list_sessions_rich(limit=10, order_by_last_active=True, project_compression_tips=False)
    assert ids(ranked) == ["p1", "p2", "my-project-notes"]
    by_id = await store.list_sessions_rich(order_by_last_active=True, id_query="TIP")
    assert [(r["id"], r["_lineage_root_id"]) for r in by_id] == [("p1-tip", "p1")]
    found = await store.list_sessions_rich(order_by_last_active=True, search_query="myproject")
    assert ids(found) == ["my-project-notes"]
    found = await store.list_sessions_rich(order_by_last_active=True, search_query="project notes")
    assert ids(found) == ["my-project-notes"]
    # id/search filters only apply when ranking by last activity (reference behaviour)
    assert len(await store.list_sessions_rich(id_query="nothing-matches")) == 3


async def test_compression_tip_projection(store: SessionDB) -> None:
    await make(store, "root", 100, cwd="/a", model="m1")
    await store.end_session("root", "compression")
    await make(store, "mid", 200, parent_session_id="root", model="m2")
    await store.end_session("mid", "compression")
    await make(store, "tip", 300, parent_session_id="mid", model="m3", cwd="/b")
    await make(store, "fork", 400, parent_session_id="mid", model_config={"_branched_from": "mid"})
    await store.append_message("tip", "user", "latest words")
    await set_columns(store, "tip", title="Tip title")
    rows = await store.list_sessions_rich(limit=10)
    root = next(r for r in rows if r.get("_lineage_root_id") == "root")
    assert root["id"] == "tip" and root["model"] == "m3" and root["cwd"] == "/b"
    assert root["preview"] == "latest words" and root["title"] == "Tip title" and root["message_count"] == 1
    assert root["started_at"] == 100  # not a projected key
    plain = await store.list_sessions_rich(limit=10, include_children=True)
    assert all("_lineage_root_id" not in r for r in plain)
    rich = await store.get_session_rich_row("root")
    assert rich is not None and rich["id"] == "root" and "unread" not in rich and rich["preview"] == ""
    assert await store.get_session_rich_row("missing") is None


async def test_invalid_model_config_json_does_not_break_listing(store: SessionDB) -> None:
    await make(store, "ok", 1)
    await make(store, "junk", 2)
    await store.update_session_meta("junk", "{not json")
    assert ids(await store.list_sessions_rich(order_by_last_active=True)) == ["junk", "ok"]
    assert await store.session_count(exclude_children=True) == 2
    assert await store.get_session_model_config_value("junk", "a", "dflt") == "dflt"


# ------------------------------------------------------------------ counters


async def test_counters(store: SessionDB) -> None:
    await make(store, "a", 1, source="cli")
    await make(store, "b", 2, source="")
    await make(store, "c", 3, source="tui")
    await make(store, "d", 4, source="tui")
    await make(store, "e", 5, source="tui", parent_session_id="a", model_config={"_delegate_from": "a"})
    assert await store.session_count_by_source() == {"tui": 3, "cli": 2}
    assert await store.session_count_by_source(exclude_children=True) == {"cli": 2, "tui": 2}
    assert await store.session_count_ge(5) is True
    assert await store.session_count_ge(6) is False
    assert await store.session_count_ge(0) is True
    await store.end_session("c", "done")
    await store.end_session("a", "done")
    await store.append_message("a", "user", "x")
    assert await store.count_empty_sessions() == 1
    await store.close()
    with pytest.raises(RuntimeError, match="^SessionDB connection is closed$"):
        await store.session_count_by_source()
    with pytest.raises(StoreClosedError, match="^SessionDB is closed$"):
        await store.session_count()


async def test_resolve_session_id(store: SessionDB) -> None:
    for sid in ("20240101_aaa", "20240101_aab", "20240202_x", "a_b%c", "axbyc"):
        await store.create_session(sid, "cli")
    assert await store.resolve_session_id("20240202_x") == "20240202_x"
    assert await store.resolve_session_id("20240202") == "20240202_x"
    assert await store.resolve_session_id("20240101_aa") is None  # ambiguous
    assert await store.resolve_session_id("2024010") is None
    assert await store.resolve_session_id("a_b%") == "a_b%c"  # wildcards are literal
    assert await store.resolve_session_id("zzz") is None
    with pytest.raises(ValueError, match="non-empty"):
        await store.resolve_session_id("")


async def test_cwds_skill_sessions_first_assistant(store: SessionDB) -> None:
    await make(store, "a", 10, cwd="/x")
    await make(store, "b", 20, cwd="/x")
    await make(store, "c", 30, cwd="/y")
    await make(store, "d", 40, cwd="  ")
    await set_columns(store, "c", archived=1)
    await store.end_session("a", "done")
    await set_columns(store, "a", ended_at=25)
    assert await store.distinct_session_cwds() == [{"cwd": "/x", "sessions": 2, "last_active": 25.0}]
    assert [r["cwd"] for r in await store.distinct_session_cwds(include_archived=True)] == ["/x", "/y"]

    await store.append_message("a", "user", SKILL + '"review" skill. The full skill content is loaded below.]')
    await store.append_message("b", "user", "no skill " + SKILL)
    await store.append_message("c", "user", SKILL.lower() + "x")
    await set_columns(store, "a", title="A")
    await set_columns(store, "b", title="B")
    await set_columns(store, "c", title="C")
    rows = await store.list_skill_scaffolded_sessions()
    assert [(r["id"], r["title"]) for r in rows] == [("a", "A")]
    assert rows[0]["content"].startswith(SKILL)
    assert await store.list_skill_scaffolded_sessions(limit=0) == []

    assert await store.get_first_assistant_text("a") == ""
    await store.append_message("a", "assistant", None, tool_calls=[{"id": "1"}])
    await store.append_message("a", "assistant", [{"type": "text", "text": "structured"}])
    await store.append_message("a", "assistant", "plain answer")
    assert await store.get_first_assistant_text("a") == ""  # first non-NULL reply is structured
    await store.append_message("b", "assistant", "B answer")
    assert await store.get_first_assistant_text("b") == "B answer"


# ------------------------------------------------------------------ messages


async def _transcript(db: SessionDB, sid: str) -> list[int]:
    await db.create_session(sid, "cli")
    out = []
    for i, role in enumerate(["system", "user", "assistant", "tool", "user", "assistant", "user", "assistant"]):
        out.append(await db.append_message(sid, role, f"{role}-{i}" if role != "tool" else "", tool_call_id="t"))
    return out


async def test_messages_around_and_anchored_view(store: SessionDB) -> None:
    row_ids = await _transcript(store, "s")
    await store.create_session("other", "cli")
    foreign = await store.append_message("other", "user", "elsewhere")
    await set_columns(store, "s", message_count=8)
    await raw_exec(store, "UPDATE messages SET active = 0 WHERE id = ?", (row_ids[2],))

    around = await store.get_messages_around("s", row_ids[3], window=2)
    assert [m["id"] for m in around["window"]] == row_ids[1:6]
    assert (around["messages_before"], around["messages_after"]) == (2, 2)
    assert around["window"][1]["active"] == 0  # any active state
    edge = await store.get_messages_around("s", row_ids[0], window=3)
    assert [m["id"] for m in edge["window"]] == row_ids[0:4] and edge["messages_before"] == 0
    assert await store.get_messages_around("s", foreign) == {"window": [], "messages_before": 0, "messages_after": 0}
    assert (await store.get_messages_around("s", row_ids[3], window=-4))["window"][0]["id"] == row_ids[3]

    view = await store.get_anchored_view("s", row_ids[4], window=1, bookend=2)
    assert [m["id"] for m in view["window"]] == [row_ids[4], row_ids[5]]  # the tool row is filtered out
    assert [m["id"] for m in view["bookend_start"]] == [row_ids[1], row_ids[2]]
    assert [m["id"] for m in view["bookend_end"]] == [row_ids[6], row_ids[7]]
    anchored_tool = await store.get_anchored_view("s", row_ids[3], window=0, bookend=0)
    assert [m["id"] for m in anchored_tool["window"]] == [row_ids[3]]  # the anchor always stays
    everything = await store.get_anchored_view("s", row_ids[3], window=1, keep_roles=None, bookend=1)
    assert [m["role"] for m in everything["window"]] == ["assistant", "tool", "user"]
    assert [m["role"] for m in everything["bookend_start"]] == ["system"]
    empty = await store.get_anchored_view("s", 10**9)
    assert empty == {"window": [], "messages_before": 0, "messages_after": 0, "bookend_start": [], "bookend_end": []}
    with pytest.raises(TypeError, match="keep_roles"):
        await store.get_anchored_view("s", row_ids[3], keep_roles="user")  # type: ignore[arg-type]


async def test_recent_user_messages_and_latest_ids(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    first = await store.append_message("s", "user", "first question")
    await store.append_message("s", "user", "synthetic", display_kind="note")
    long = await store.append_message("s", "user", "word " * 40)
    await store.append_message("s", "assistant", "answer")
    blank = await store.append_message("s", "user", "   ")
    multi = await store.append_message("s", "user", [{"type": "image_url", "image_url": {"url": "u"}}])
    recent = await store.list_recent_user_messages("s", limit=10)
    assert [r["id"] for r in recent] == [multi, blank, long, first]
    assert recent[0]["preview"] == "[multimodal content]"
    assert recent[2]["preview"] == ("word " * 40).strip()[:77] + "..." and len(recent[2]["preview"]) == 80
    assert [r["id"] for r in await store.list_recent_user_messages("s", limit=1)] == [multi]

    assert await store.latest_message_row_id("s") == multi
    assert await store.latest_message_row_id("s", offset=1) == long  # blank text is skipped
    assert await store.latest_message_row_id("s", offset=1, require_text=False) == blank
    assert await store.latest_message_row_id("s", role="assistant") == first + 3
    assert await store.latest_message_row_id("s", role="tool") is None
    assert await store.latest_message_row_id("s", offset=-1) is None
    assert await store.latest_message_row_id("", role="user") is None
    assert await store.latest_user_message_row_id("s") == multi
    assert await store.get_message_role("s", first) == "user"
    assert await store.get_message_role("other", first) is None
    with pytest.raises(ValueError, match="limit must be non-negative"):
        await store.list_recent_user_messages("s", limit=-1)


async def test_flags_api_content_and_clear(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "q", platform_message_id=12345)
    last = await store.append_message("s", "user", [{"type": "text", "text": "t"}])
    assert await store.has_platform_message_id("s", "12345") and await store.has_platform_message_id("s", 12345)
    assert not await store.has_platform_message_id("s", "999")
    assert await store.has_archived_messages("s") is False
    assert await store.set_latest_user_api_content("s", "q", "API") == 0  # not the newest user row
    assert await store.set_latest_user_api_content("s", [{"type": "text", "text": "t"}], "API\ud800") == 1
    rows = await store.get_messages("s")
    assert rows[-1]["id"] == last and rows[-1]["api_content"] == "API\ufffd"
    await store.replace_messages("s", [{"role": "user", "content": "new"}], archive_dropped=True)
    assert await store.has_archived_messages("s") is True
    await store.clear_messages("s")
    s = await store.get_session("s")
    assert s is not None and s["message_count"] == 0 and s["tool_call_count"] == 0
    assert await store.message_count("s") == 0


# ------------------------------------------------------------------ metadata


async def test_update_session_cwd(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.update_session_cwd("s", "/a", git_branch="main", git_repo_root="/a")
    await store.update_session_cwd("s", "/a/b", git_branch="  ", git_repo_root=None)
    s = await store.get_session("s")
    assert s is not None and (s["cwd"], s["git_branch"], s["git_repo_root"]) == ("/a/b", "main", "/a")
    await store.update_session_cwd("s", "/c", git_branch="dev", replace_git_meta=True)
    s = await store.get_session("s")
    assert s is not None and (s["cwd"], s["git_branch"], s["git_repo_root"]) == ("/c", "dev", None)
    await store.update_session_cwd("s", "")
    await store.update_session_cwd("", "/z")
    s = await store.get_session("s")
    assert s is not None and s["cwd"] == "/c"
    with pytest.raises(TypeError, match="cwd"):
        await store.update_session_cwd("s", 5)  # type: ignore[arg-type]


async def test_runtime_lock_billing_route_and_model_config_patch(store: SessionDB) -> None:
    await store.create_session("s", "cli", model="m0", system_prompt="SYS", model_config={"_branched_from": "p"})
    await store.update_session_runtime_lock("s", provider="prov", model_options={"t": 1}, confirmed=True)
    s = await store.get_session("s")
    assert s is not None and s["model"] == "m0" and s["system_prompt"] is None and s["system_prompt_hash"] is None
    config = json.loads(s["model_config"])
    lock = config["browser_model_lock"]
    assert config["_branched_from"] == "p"
    assert (lock["provider"], lock["model"], lock["model_options"], lock["route_source"], lock["confirmed"]) == (
        "prov", "", {"t": 1}, "", True)
    assert abs(lock["updated_at"] - time.time()) < 60
    await store.update_session_runtime_lock("s", model="m1")
    assert (await store.get_session("s") or {})["model"] == "m1"
    assert await fetch_rows(store, "SELECT COUNT(*) FROM system_prompts") == [(0,)]

    await store.update_session_billing_route("s", provider="p1", base_url="https://x", billing_mode="sub")
    await store.update_session_billing_route("s", provider="p2", base_url=None)
    s = await store.get_session("s")
    assert s is not None and (s["billing_provider"], s["billing_base_url"], s["billing_mode"]) == ("p2", None, "sub")

    assert await store.patch_session_model_config("s", {"a": {"n": None}, "browser_model_lock": None}) is True
    assert json.loads((await store.get_session("s") or {})["model_config"]) == {"_branched_from": "p", "a": {"n": None}}
    assert await store.get_session_model_config_value("s", "a") == {"n": None}
    assert await store.get_session_model_config_value("s", "zz", 7) == 7
    assert await store.get_session_model_config_value("missing", "a", "d") == "d"
    assert await store.patch_session_model_config("s", {"a": None, "_branched_from": None}) is True
    assert (await store.get_session("s") or {})["model_config"] is None  # an empty config is NULL
    assert await store.patch_session_model_config("missing", {"a": 1}) is False
    assert await store.patch_session_model_config("s", []) is False  # type: ignore[arg-type]
    assert await store.patch_session_model_config("s", {}) is False
    with pytest.raises(ValueError, match="patch.*finite"):
        await store.patch_session_model_config("s", {"x": float("nan")})
    with pytest.raises(TypeError, match="keys must be strings"):
        await store.patch_session_model_config("s", {1: "x"})  # type: ignore[dict-item]
    await store.update_session_runtime_lock("missing", model="m")  # unknown session: no-op
    assert await store.get_session("missing") is None


async def test_backfill_repo_roots(store: SessionDB) -> None:
    await store.create_session("a", "cli", cwd="/r/x")
    await store.create_session("b", "cli", cwd="/r/x", git_repo_root="/keep")
    await store.create_session("c", "cli", cwd="/other")
    assert await store.backfill_repo_roots({"/r/x": "/r", "/other": "", "": "/nothing"}) == 1
    roots = [(await store.get_session(s) or {})["git_repo_root"] for s in ("a", "b", "c")]
    assert roots == ["/r", "/keep", None]
    assert await store.backfill_repo_roots({}) == 0
    with pytest.raises(TypeError, match="cwd_to_root"):
        await store.backfill_repo_roots([("/r/x", "/r")])  # type: ignore[arg-type]


# ------------------------------------------------------------------ activity


async def test_activity_never_moves_backwards_and_clear_keeps_time(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    snapshot = await store.get_session_activity("s")
    assert snapshot is not None and snapshot["last_activity_at"] is None and snapshot["provenance"] == "unknown"
    assert await store.touch_session_activity("s", 100.0, description="  compressing  ", provenance="agent.compression")
    assert not await store.touch_session_activity("s", 90.0, description="older")
    assert not await store.touch_session_activity("s", 100.0, description="same time")
    assert await store.touch_session_activity("s", 110, description="x" * 500, provenance="future.kind")
    snap = await store.get_session_activity("s")
    assert snap is not None
    assert snap["last_activity_at"] == 110.0 and snap["last_activity_ts"] == 110.0
    assert len(snap["description"]) == 120 and snap["description"].endswith("...")
    assert snap["last_activity_desc"] == snap["last_activity_description"] == snap["description"]
    assert snap["provenance"] == snap["last_activity_provenance"] == "unknown"
    assert snap["seconds_since_activity"] > 1_000_000
    assert await store.clear_session_activity_labels("s") is True
    assert await store.clear_session_activity_labels("s") is False  # already clear: no write
    snap = await store.get_session_activity("s")
    assert snap is not None and snap["last_activity_at"] == 110.0 and snap["description"] == ""
    assert await store.get_session_activity("missing") is None
    assert await store.touch_session_activity("missing") is False
    assert await store.touch_session_activity("") is False
    # last_active in listings includes the heartbeat
    now = time.time() + 1000
    await store.touch_session_activity("s", now, description="working")
    assert (await store.list_sessions_rich())[0]["last_active"] == now
    with pytest.raises(ValueError, match="finite"):
        await store.touch_session_activity("s", float("inf"))
    with pytest.raises(TypeError, match="description"):
        await store.touch_session_activity("s", description=5)  # type: ignore[arg-type]


@pytest.mark.backends("sqlite")  # a SQLite file lock held by another connection
async def test_activity_write_gives_up_quickly_when_file_is_locked(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    blocker = driver_module().connect(str(store.db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert await store.touch_session_activity("s", description="busy") is False
        assert time.monotonic() - started < 3.0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.touch_session_activity("s", description="free") is True


# ------------------------------------------------------------------ bad input


async def test_bad_arguments_fail_before_any_io(db_path: Path) -> None:
    db = SessionDB(db_path)
    try:
        bad_calls = [
            (TypeError, db.list_sessions_rich(sources="cli")),  # type: ignore[arg-type]
            (TypeError, db.list_sessions_rich(exclude_sources=[1])),  # type: ignore[list-item]
            (ValueError, db.list_sessions_rich(limit=-1)),
            (ValueError, db.list_sessions_rich(offset=-5)),
            (TypeError, db.list_sessions_rich(limit="10")),  # type: ignore[arg-type]
            (TypeError, db.list_sessions_rich(limit=True)),  # type: ignore[arg-type]
            (TypeError, db.list_sessions_rich(include_archived="yes")),  # type: ignore[arg-type]
            (TypeError, db.list_sessions_rich(cwd_prefix=Path("/x"))),  # type: ignore[arg-type]
            (TypeError, db.session_count(min_message_count="3")),  # type: ignore[arg-type]
            (TypeError, db.session_count_ge("1")),  # type: ignore[arg-type]
            (ValueError, db.list_skill_scaffolded_sessions(limit=-1)),
            (TypeError, db.get_messages_around("s", "5")),  # type: ignore[arg-type]
            (TypeError, db.get_message_role("s", 1.5)),  # type: ignore[arg-type]
            (TypeError, db.resolve_session_id(None)),  # type: ignore[arg-type]
            (ValueError, db.get_session_rich_row("bad\x00id")),
            (TypeError, db.get_session_model_config_value("s", 1)),  # type: ignore[arg-type]
            (TypeError, db.update_session_runtime_lock("s", model_options=[1])),  # type: ignore[arg-type]
        ]
        for expected, call in bad_calls:
            with pytest.raises(expected):
                await call
        assert not db_path.exists()  # nothing was opened, let alone written
    finally:
        await db.close()


@pytest.mark.backends("sqlite")  # a SQLite file lock held by another connection
async def test_reads_never_wait_for_a_long_write(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    blocker = driver_module().connect(str(store.db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        pending = asyncio.ensure_future(store.append_message("s", "user", "queued behind the lock"))
        await asyncio.sleep(0.05)
        assert ids(await asyncio.wait_for(store.list_sessions_rich(), 2)) == ["s"]
        assert not pending.done()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await pending
    assert (await store.list_sessions_rich())[0]["message_count"] == 1
