"""search_messages, search_sessions and search_sessions_by_id: shapes, routing, filters, paging."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, StoreClosedError
from hermes_state.search_text.sanitize import (
    boolean_groups,
    gap_terms,
    has_lone_cjk_run,
    quote_for_substring_index,
    sanitize_fts5_query,
)

RESULT_KEYS = ["id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model", "session_started", "context"]


def routes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Route names of the searches logged so far (HERMES_SEARCH_SLOW_MS=0 logs every search)."""
    found = []
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("slow session search: path="):
            found.append(message.split("path=", 1)[1].split()[0])
    return found


@pytest.fixture
def log_routes(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    monkeypatch.setenv("HERMES_SEARCH_SLOW_MS", "0")
    caplog.set_level(logging.INFO, logger="hermes_state.search")
    return caplog


async def seed(db: SessionDB) -> dict[str, int]:
    ids: dict[str, int] = {}
    await db.create_session("s-cli", "cli", model="model-a")
    await db.create_session("s-tg", "telegram", model="model-b")
    ids["q"] = await db.append_message("s-cli", "user", "Why did the docker compose deployment fail?")
    ids["call"] = await db.append_message(
        "s-cli",
        "assistant",
        "",
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "docker ps"}'}}],
    )
    ids["tool"] = await db.append_message("s-cli", "tool", "volume 'data' not found; dockerfile missing", tool_name="terminal")
    ids["answer"] = await db.append_message("s-cli", "assistant", "The compose volume was never created.")
    ids["tg1"] = await db.append_message("s-tg", "user", "turn 0: 你好世界 deployment notes")
    ids["tg2"] = await db.append_message("s-tg", "assistant", "Kubernetes rollout finished; deployment healthy")
    return ids


# ------------------------------------------------------------------ result shape


async def test_result_keys_order_snippet_and_context(store: SessionDB) -> None:
    ids = await seed(store)
    hits = await store.search_messages("volume")
    assert {h["id"] for h in hits} == {ids["tool"], ids["answer"]}
    for hit in hits:
        assert list(hit) == RESULT_KEYS
        assert ">>>volume<<<" in hit["snippet"]
        assert hit["source"] == "cli" and hit["model"] == "model-a"
        session = await store.get_session("s-cli")
        assert session is not None and hit["session_started"] == session["started_at"]
    answer = next(h for h in hits if h["id"] == ids["answer"])
    # The message before, the hit, and nothing after (it is the last row).
    assert answer["context"] == [
        {"role": "tool", "content": "volume 'data' not found; dockerfile missing"},
        {"role": "assistant", "content": "The compose volume was never created."},
    ]
    first = (await store.search_messages("Why"))[0]
    assert first["id"] == ids["q"]
    assert [c["role"] for c in first["context"]] == ["user", "assistant"]


async def test_tool_name_match_snippets_that_column(store: SessionDB) -> None:
    ids = await seed(store)
    hits = await store.search_messages("terminal")
    by_id = {h["id"]: h for h in hits}
    assert by_id[ids["tool"]]["snippet"] == ">>>terminal<<<"
    assert by_id[ids["tool"]]["tool_name"] == "terminal"
    assert ">>>terminal<<<" in by_id[ids["call"]]["snippet"]  # found in the tool_calls JSON


async def test_context_decodes_truncates_and_ignores_active_flags(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", [{"type": "text", "text": "look at"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "this picture"}])
    await store.append_message("s", "assistant", "needle " + "x" * 500)
    await store.append_message("s", "user", [{"type": "image_url", "image_url": {"url": "y"}}])
    hit = (await store.search_messages("needle"))[0]
    assert hit["context"] == [
        {"role": "user", "content": "look at this picture"},
        {"role": "assistant", "content": ("needle " + "x" * 500)[:200]},
        {"role": "user", "content": "[multimodal content]"},
    ]
    # Multimodal content is indexed as its stored JSON text.
    assert [h["role"] for h in await store.search_messages("picture")] == ["user"]


async def test_fields_projection_and_its_errors(store: SessionDB) -> None:
    ids = await seed(store)
    hits = await store.search_messages("docker", fields=["snippet", "id"])
    assert hits and all(list(h) == ["id", "snippet"] for h in hits)
    assert ids["q"] in {h["id"] for h in hits}
    with pytest.raises(TypeError, match="^search fields must be a collection of field names, not a string$"):
        await store.search_messages("docker", fields="id")
    with pytest.raises(ValueError, match=r"^unknown search result field\(s\): bogus, zzz$"):
        await store.search_messages("docker", fields=["zzz", "id", "bogus"])
    with_context = await store.search_messages("docker", fields={"context"})
    assert all(list(h) == ["context"] and h["context"] for h in with_context)


async def test_fields_are_validated_before_opening_or_closed_check(db_path: Path) -> None:
    db = SessionDB(db_path)
    with pytest.raises(TypeError):
        await db.search_messages("x", fields="id")
    assert not db_path.exists()
    await db.close()
    with pytest.raises(ValueError):
        await db.search_messages("x", fields=["nope"])
    with pytest.raises(StoreClosedError, match="SessionDB is closed"):
        await db.search_messages("x")


async def test_blank_queries_and_bad_arguments(store: SessionDB) -> None:
    await seed(store)
    for blank in ("", "   ", "\n\t", None, "***", "()", '""', "AND", "NOT"):
        assert await store.search_messages(blank) == [], blank  # type: ignore[arg-type]
    assert await store.search_messages("docker", limit=0) == []
    with pytest.raises(TypeError, match="query"):
        await store.search_messages(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source_filter"):
        await store.search_messages("docker", source_filter="cli")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        await store.search_messages("docker", limit=-1)
    with pytest.raises(ValueError, match="offset"):
        await store.search_messages("docker", offset=-5)


# --------------------------------------------------------------------- sanitizer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("TODO: fix", "TODO  fix"),
        ("hello AND", "hello"),
        ("(foo", "foo"),
        ("OR world", "world"),
        ("chat-send", '"chat-send"'),
        ("P2.2", '"P2.2"'),
        ("my-app.config.ts", '"my-app.config.ts"'),
        ("snake_case name", '"snake_case" name'),
        ("***", ""),
        ("dock*", "dock*"),
        ("*dock", "dock"),
        ("dock**", "dock*"),
        ('"exact phrase" more', '"exact phrase" more'),
        ('say "hi', "say  hi"),
        ("a+b^c{d}", "a b c d"),
        ("role:user", "role user"),
        ('"a-b" c-d', '"a-b" "c-d"'),
        ("NEAR(a b)", "NEAR a b"),
    ],
)
def test_sanitizer_examples(raw: str, expected: str) -> None:
    assert sanitize_fts5_query(raw) == expected


def test_sanitizer_is_linear_and_caps_length() -> None:
    hostile = ("a_" * 5000) + "!" + ("x-" * 5000) + '"' * 3001
    out = sanitize_fts5_query(hostile)  # a backtracking pattern would never return
    assert out == '"' + "a_" * 1024 + '"'  # capped at 2,048 characters, then phrased
    assert sanitize_fts5_query("q" * 100_000) == "q" * 2048
    assert sanitize_fts5_query("ab\x00cd\ud800") == "ab cd\ufffd"


def test_query_helpers() -> None:
    assert quote_for_substring_index('ab "c" OR d') == '"ab" """c""" OR "d"'
    assert gap_terms('"two words" dock* AND x NEAR') == ["two words", "dock", "x"]
    assert boolean_groups("a b OR c NOT d OR NOT e") == [(("a", "b"), ()), (("c",), ("d",))]
    assert has_lone_cjk_run("世") and has_lone_cjk_run("abc 世 界界") and not has_lone_cjk_run("世界")
    assert has_lone_cjk_run("好。")  # CJK punctuation separates runs


# ----------------------------------------------------------------------- routing


async def test_prefix_phrase_and_operators(store: SessionDB) -> None:
    ids = await seed(store)
    assert {h["id"] for h in await store.search_messages("dock*")} == {ids["q"], ids["call"], ids["tool"]}
    assert [h["id"] for h in await store.search_messages('"compose deployment"')] == [ids["q"]]
    assert {h["id"] for h in await store.search_messages("deployment NOT docker")} == {ids["tg1"], ids["tg2"]}
    assert {h["id"] for h in await store.search_messages("kubernetes OR volume")} == {ids["tg2"], ids["tool"], ids["answer"]}
    assert [h["id"] for h in await store.search_messages("TODO: docker compose")] == []
    assert [h["id"] for h in await store.search_messages("docker: compose")] == [ids["q"]]


async def test_fts5_syntax_error_returns_empty_without_fallback(store: SessionDB, log_routes: Any) -> None:
    await seed(store)
    assert await store.search_messages("compose -docker") == []
    assert await store.search_messages("docker,") == []
    assert routes(log_routes) == ["fts5", "fts5"]


async def test_zero_hit_fallback_finds_substrings_via_trigram(store: SessionDB, log_routes: Any) -> None:
    ids = await seed(store)
    hits = await store.search_messages("cker")
    assert {h["id"] for h in hits} == {ids["q"], ids["call"]}  # tool rows are not trigram-indexed
    assert all(">>>cker<<<" in h["snippet"] for h in hits)
    assert routes(log_routes)[-1] == "trigram"
    # Tool rows wanted: no substring fallback.
    assert await store.search_messages("cker", role_filter=["tool"]) == []
    # A token shorter than three characters is not trigram-searchable.
    assert await store.search_messages("ck") == []


async def test_cjk_routes_without_the_bigram_index(store: SessionDB, log_routes: Any) -> None:
    ids = await seed(store)
    long = await store.search_messages("你好世界")
    assert [h["snippet"] for h in long] == ["turn 0: >>>你好世界<<< deployment notes"]
    short = await store.search_messages("世界")
    assert [h["id"] for h in short] == [ids["tg1"]]
    assert short[0]["snippet"] == "turn 0: 你好世界 deployment notes"  # LIKE path: no markers
    assert routes(log_routes) == ["trigram", "like_scan"]


async def test_cjk_like_path_semantics(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    a = await store.append_message("s", "user", "世界 peace", timestamp=100.0)
    b = await store.append_message("s", "user", "和平 only", timestamp=200.0)
    c = await store.append_message("s", "user", "literal 世% sign", timestamp=300.0)
    await store.append_message("s", "user", "unrelated", timestamp=400.0)
    # Any token matches (OR), newest first.
    assert [h["id"] for h in await store.search_messages("世界 和平")] == [b, a]
    # LIKE wildcards in the query are literal.
    assert [h["id"] for h in await store.search_messages("世%")] == [c]
    assert await store.search_messages("世_") == []
    long = "x" * 60 + "世界" + "y" * 200
    d = await store.append_message("s", "assistant", long, timestamp=500.0)
    hit = (await store.search_messages("世界"))[0]
    assert hit["id"] == d and hit["snippet"] == long[20:140]


async def test_trigram_never_returns_tool_rows(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "tool", "构建失败了 error", tool_name="build")
    ok = await store.append_message("s", "assistant", "构建失败了 again")
    assert [h["id"] for h in await store.search_messages("构建失败")] == [ok]
    # Asking for tool rows takes the LIKE path, which sees them.
    assert [h["role"] for h in await store.search_messages("构建失败", role_filter=["tool"])] == ["tool"]


# ----------------------------------------------------------------------- filters


async def test_source_exclude_and_role_filters(store: SessionDB) -> None:
    ids = await seed(store)
    everything = {h["id"] for h in await store.search_messages("deployment")}
    assert everything == {ids["q"], ids["tg1"], ids["tg2"]}
    assert await store.search_messages("deployment", source_filter=[]) == []
    assert await store.search_messages("世界", source_filter=[]) == []
    assert {h["id"] for h in await store.search_messages("deployment", exclude_sources=[])} == everything
    assert {h["id"] for h in await store.search_messages("deployment", role_filter=[])} == everything
    assert {h["id"] for h in await store.search_messages("deployment", source_filter=["telegram"])} == {ids["tg1"], ids["tg2"]}
    assert {h["id"] for h in await store.search_messages("deployment", exclude_sources=["telegram"])} == {ids["q"]}
    assert {h["id"] for h in await store.search_messages("deployment", role_filter=("assistant",))} == {ids["tg2"]}
    assert {h["id"] for h in await store.search_messages("deployment", source_filter=["cli", "telegram"], role_filter=["user"])} == {ids["q"], ids["tg1"]}


@pytest.mark.backends("sqlite")  # archive_and_compact / rewind are not on PostgreSQL yet (pgA); enable with them
async def test_compacted_rows_are_searchable_rewound_rows_are_not(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "original zebra question")
    await store.append_message("s", "assistant", "original zebra answer")
    await store.archive_and_compact("s", [{"role": "user", "content": "summary mentions zebra"}])
    rows = await store.get_messages("s", include_inactive=True)
    assert sorted((r["active"], r["compacted"]) for r in rows) == [(0, 1), (0, 1), (1, 0)]
    assert len(await store.search_messages("zebra")) == 3
    later = await store.append_message("s", "user", "zebra follow-up")
    await store.append_message("s", "assistant", "zebra reply")
    await store.rewind_to_message("s", later)
    default = {h["id"] for h in await store.search_messages("zebra")}
    assert later not in default and len(default) == 3
    assert len(await store.search_messages("zebra", include_inactive=True)) == 5


# ----------------------------------------------------------------- sort, paging


async def test_sort_orders_and_paging(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    ids = [await store.append_message("s", "user", f"apple {'apple ' * (i % 3)}item {i}", timestamp=1000.0 + i) for i in range(12)]
    newest = await store.search_messages("apple", sort="newest", limit=50)
    assert [h["id"] for h in newest] == ids[::-1]
    oldest = await store.search_messages("apple", sort=" OLDEST ", limit=50)
    assert [h["id"] for h in oldest] == ids
    assert all(">>>apple<<<" in h["snippet"] for h in newest)
    ranked = await store.search_messages("apple", sort="whatever", limit=50)
    assert sorted(h["id"] for h in ranked) == ids
    assert [h["id"] for h in ranked] != ids  # bm25: more occurrences rank higher
    pages = [await store.search_messages("apple", sort="oldest", limit=5, offset=o) for o in (0, 5, 10, 15)]
    assert [[h["id"] for h in p] for p in pages] == [ids[0:5], ids[5:10], ids[10:12], []]
    # Default order is bm25 rank: the page boundaries agree with one big page.
    ranked_pages = [h["id"] for o in (0, 4, 8) for h in await store.search_messages("apple", limit=4, offset=o)]
    assert ranked_pages == [h["id"] for h in ranked]


async def test_search_is_read_only_and_reads_do_not_wait_for_writes(store: SessionDB) -> None:
    await seed(store)
    await store.create_session("bulk", "cli")
    before = await store.message_count()
    batch = [{"role": "user", "content": f"bulkterm row {i} " + "filler " * 40} for i in range(20000)]
    write = asyncio.ensure_future(store.append_messages_batch("bulk", batch))
    seen_during_write = []
    while not write.done():
        hits = await store.search_messages("bulkterm")
        if not write.done():
            seen_during_write.append(len(hits))
        await asyncio.sleep(0.005)
    assert await write == 20000
    # Searches kept completing while the batch was in flight; they saw none of
    # it before its COMMIT and all of it after (never a partial batch).
    assert seen_during_write.count(0) >= 2 and set(seen_during_write) <= {0, 20}
    assert len(await store.search_messages("bulkterm", limit=7)) == 7
    assert await store.message_count() == before + 20000


async def test_read_only_store_searches(db_path: Path) -> None:
    db = SessionDB(db_path)
    ids = await seed(db)
    await db.close()
    ro = SessionDB(db_path, read_only=True)
    try:
        assert [h["id"] for h in await ro.search_messages('"compose deployment"')] == [ids["q"]]
        assert [h["id"] for h in await ro.search_messages("世界")] == [ids["tg1"]]
        assert await ro.fts_optimize_available() is False
        assert await ro.optimize_fts_storage() == {"ok": False, "reason": "read_only"}
    finally:
        await ro.close()


# ---------------------------------------------------------------- session search


async def test_search_sessions_lists_by_activity_with_filters(store: SessionDB) -> None:
    await store.create_session("old", "cli", cwd="/work/app/sub")
    await store.create_session("mid", "telegram", git_repo_root="/work/app")
    await store.create_session("new", "cli", cwd="/work/other")
    await store.create_session("child", "cli", parent_session_id="old", cwd="/work/app")
    await store.append_message("old", "user", "bump", timestamp=time.time() + 100)
    rows = await store.search_sessions()
    assert rows[0]["id"] == "old"
    assert {r["id"] for r in rows} == {"old", "mid", "new", "child"}
    session = await store.get_session("new")
    row = next(r for r in rows if r["id"] == "new")
    assert list(row) == [*session, "last_active"] and row["last_active"] == session["started_at"]
    assert [r["id"] for r in await store.search_sessions(source="telegram")] == ["mid"]
    assert {r["id"] for r in await store.search_sessions(workspace_key="/work/app")} == {"old", "mid", "child"}
    assert {r["id"] for r in await store.search_sessions(workspace_key="/work/app/")} == {"old", "mid", "child"}
    assert await store.search_sessions(workspace_key="/work/ap") == []
    first, second = await store.search_sessions(limit=2), await store.search_sessions(limit=2, offset=2)
    assert [r["id"] for r in first + second] == [r["id"] for r in rows]


async def test_search_sessions_by_id_ranks_exact_prefix_substring(store: SessionDB) -> None:
    for sid in ("x-abc-1", "abc", "abc-2", "zz"):
        await store.create_session(sid, "cli")
    await store.append_message("x-abc-1", "user", "newest activity")
    rows = await store.search_sessions_by_id("  ABC ")
    assert [r["id"] for r in rows] == ["abc", "abc-2", "x-abc-1"]
    assert [r["id"] for r in await store.search_sessions_by_id("abc", limit=1)] == ["abc"]
    assert await store.search_sessions_by_id("   ") == []
    assert await store.search_sessions_by_id("abc", limit=0) == []
    assert [r["id"] for r in await store.search_sessions_by_id("abc", source="nope")] == []


async def test_closed_store_rejects_search_calls(db_path: Path) -> None:
    db = SessionDB(db_path)
    await seed(db)
    await db.close()
    for call in (
        db.search_messages("docker"),
        db.search_messages(""),
        db.search_sessions(),
        db.fts_rebuild_status(),
        db.optimize_fts(),
    ):
        with pytest.raises(RuntimeError, match="^SessionDB is closed$"):
            await call


def _rank_order(path: Path, match: str, include_inactive: bool, limit: int, offset: int) -> list[int]:
    """The reference query shape: FTS5 ``ORDER BY rank`` joined with the visibility filter."""
    from contextlib import closing

    from hermes_state.sqlite.driver import driver_module

    visible = "" if include_inactive else " AND (m.active = 1 OR m.compacted = 1)"
    with closing(driver_module().connect(str(path))) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT m.id FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
                f"WHERE messages_fts MATCH ?{visible} ORDER BY rank LIMIT ? OFFSET ?",
                (match, limit, offset),
            )
        ]


@pytest.mark.backends("sqlite")  # compares with bm25() read from the SQLite file (PostgreSQL ranks by ts_rank)
@pytest.mark.parametrize("hidden", [30, 200, 700])
async def test_relevance_pages_match_fts5_rank_even_when_top_rows_are_hidden(store: SessionDB, hidden: int) -> None:
    # Short documents rank best; put many of them behind a rewind so the
    # best-ranked candidates are invisible and deeper candidates are needed.
    await store.create_session("hidden", "cli")
    await store.create_session("shown", "cli")
    first = None
    rows = [{"role": "user", "content": f"needle {i}"} for i in range(hidden)]
    await store.append_messages_batch("hidden", rows)
    first = (await store.get_messages("hidden"))[0]["id"]
    await store.rewind_to_message("hidden", first)
    shown = [{"role": "user", "content": "needle " + "hay " * (i % 7) + f"item {i}"} for i in range(90)]
    shown += [{"role": "user", "content": "needle needle " + "hay " * (i % 5)} for i in range(10)]
    await store.append_messages_batch("shown", shown)
    for limit, offset in ((20, 0), (20, 40), (7, 93), (50, 80)):
        got = [h["id"] for h in await store.search_messages("needle", limit=limit, offset=offset)]
        assert got == _rank_order(store.db_path, "needle", False, limit, offset)
    every = [h["id"] for h in await store.search_messages("needle", limit=20, include_inactive=True)]
    assert every == _rank_order(store.db_path, "needle", True, 20, 0)
    prefix = [h["id"] for h in await store.search_messages("need*", limit=30)]
    assert prefix == _rank_order(store.db_path, "need*", False, 30, 0)
    hits = await store.search_messages("need*", limit=30)
    assert all(">>>needle<<<" in h["snippet"] for h in hits)


class _StoreWithoutListing(SessionDB):
    """A store built without the listing method group (search must not depend on it)."""

    list_sessions_rich = None  # type: ignore[assignment]


async def test_search_sessions_by_id_without_a_listing_method(db_path: Path) -> None:
    db = _StoreWithoutListing(db_path)
    try:
        await db.create_session("abc", "cli")
        await db.create_session("x-abc", "telegram")
        await db.create_session("abc-sub", "cli", parent_session_id="abc", model_config={"_delegate_from": "abc"})
        await db.create_session("abc-branch", "cli", parent_session_id="abc", model_config={"_branched_from": "abc"})
        await db.create_session("abc-old", "cli")
        await db.append_message("x-abc", "user", "recent")
        rows = await db.search_sessions_by_id("ABC")
        # exact, then prefixes (freshest first), then substrings; no subagent runs
        assert [r["id"] for r in rows] == ["abc", "abc-old", "abc-branch", "x-abc"]
        assert list(rows[0])[-1] == "last_active"
        assert [r["id"] for r in await db.search_sessions_by_id("abc", source="telegram")] == ["x-abc"]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", exclude_sources=["cli"])] == ["x-abc"]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", limit=2)] == ["abc", "abc-old"]
    finally:
        await db.close()


async def test_slow_search_threshold_comes_from_config(db_path: Path, hermes_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hermes_state.search")
    (hermes_home / "config.yaml").write_text("sessions:\n  search_slow_ms: 0\n")
    db = SessionDB(db_path)
    try:
        await seed(db)
        await db.search_messages("docker")
        await db.search_messages("世界")
        assert routes(caplog) == ["fts5", "like_scan"]
    finally:
        await db.close()
    (hermes_home / "config.yaml").write_text("sessions:\n  search_slow_ms: 60000\n")
    caplog.clear()
    db = SessionDB(db_path)
    try:
        await db.search_messages("docker")
        assert routes(caplog) == []
    finally:
        await db.close()
