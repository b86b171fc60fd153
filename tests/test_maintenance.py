"""Deletion, retention (prune / archive), auto-maintenance, VACUUM and storage size, on real files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.sqlite.driver import driver_module
from tests.raw_sql import fetch_rows, set_columns


DAY = 86_400.0


async def ended(db: SessionDB, session_id: str, *, age_days: float = 0, messages: int = 0, **kwargs: Any) -> None:
    """An ended session whose start (and messages) lie ``age_days`` in the past."""
    await db.create_session(session_id, kwargs.pop("source", "cli"), **kwargs)
    stamp = time.time() - age_days * DAY
    if messages:
        await db.append_messages_batch(
            session_id, [{"role": "user", "content": f"{session_id} {i}", "timestamp": stamp} for i in range(messages)]
        )
    await db.end_session(session_id, "done")
    await set_columns(db, session_id, started_at=stamp, ended_at=stamp)


async def existing(db: SessionDB, *candidates: str) -> list[str]:
    return [s for s in candidates if await db.get_session(s) is not None]


# ------------------------------------------------------------------ deletion


async def test_delete_targets_and_delete_if_empty(store: SessionDB, tmp_path: Path) -> None:
    await store.create_session("root", "cli")
    await store.create_session("d1", "tool", parent_session_id="root", model_config={"_delegate_from": "root"})
    await store.create_session("d2", "tool", model_config={"_delegate_from": "d1"})
    await store.create_session("kid", "cli", parent_session_id="root")
    assert await store.get_session_delete_targets("root") == ["root", "d1", "d2"]
    assert await store.get_session_delete_targets("missing") == []

    await store.create_session("titled", "cli")
    await set_columns(store, "titled", title="T")
    await store.create_session("talky", "cli")
    await store.append_message("talky", "user", "hi")
    await store.create_session("empty", "cli", system_prompt="unique prompt")
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    (sessions_dir / "empty.jsonl").write_text("")
    assert await store.delete_session_if_empty("titled") is False
    assert await store.delete_session_if_empty("talky") is False
    assert await store.delete_session_if_empty("root") is False  # has children
    assert await store.delete_session_if_empty("missing") is False
    assert await store.delete_session_if_empty("empty", sessions_dir=sessions_dir) is True
    assert await store.get_session("empty") is None and not (sessions_dir / "empty.jsonl").exists()
    assert (await fetch_rows(store, "SELECT COUNT(*) FROM system_prompts"))[0][0] == 0


async def test_delete_sessions_cascades_delegates_and_detaches_the_rest(store: SessionDB, tmp_path: Path) -> None:
    await store.create_session("a", "cli")
    await store.create_session("a-sub", "tool", parent_session_id="a", model_config={"_delegate_from": "a"})
    await store.create_session("a-kid", "cli", parent_session_id="a", model_config={"_branched_from": "a"})
    await store.create_session("b", "cli")
    await store.create_session("keep", "cli")
    await store.append_message("a-sub", "user", "delegate work")
    await store.update_token_counts("a", input_tokens=5, model="m")
    sessions_dir = tmp_path / "sd"
    sessions_dir.mkdir()
    for name in ("a.json", "a-sub.jsonl", "request_dump_b_1.json", "keep.json"):
        (sessions_dir / name).write_text("{}")
    assert await store.delete_sessions(["a", "b", "ghost", "a"], sessions_dir=sessions_dir) == 2
    assert await existing(store, "a", "a-sub", "a-kid", "b", "keep") == ["a-kid", "keep"]
    assert (await store.get_session("a-kid") or {})["parent_session_id"] is None
    assert sorted(p.name for p in sessions_dir.iterdir()) == ["keep.json"]
    assert await store.message_count() == 0
    assert (await fetch_rows(store, "SELECT COUNT(*) FROM session_model_usage"))[0][0] == 0
    assert await store.delete_sessions([]) == 0
    with pytest.raises(TypeError, match="session_ids"):
        await store.delete_sessions("keep")  # type: ignore[arg-type]


async def test_delete_empty_and_ghost_sessions(store: SessionDB) -> None:
    await ended(store, "empty-ended")
    await ended(store, "full-ended", messages=2)
    await store.create_session("empty-open", "cli")
    await ended(store, "empty-archived")
    await set_columns(store, "empty-archived", archived=1)
    await ended(store, "ghost", source="tui", age_days=2)
    await ended(store, "young-ghost", source="tui")
    await ended(store, "titled-ghost", source="tui", age_days=2)
    await set_columns(store, "titled-ghost", title="kept")
    await store.create_session("ghost-child", "cli", parent_session_id="ghost")
    assert await store.prune_empty_ghost_sessions() == 1
    assert await store.get_session("ghost") is None
    assert (await store.get_session("ghost-child") or {})["parent_session_id"] is None
    assert await store.count_empty_sessions() == 3  # empty-ended, young-ghost, titled-ghost
    assert await store.delete_empty_sessions() == 3
    assert await existing(store, "empty-ended", "full-ended", "empty-open", "empty-archived") == [
        "full-ended", "empty-open", "empty-archived"]


# ----------------------------------------------------------------- retention


async def test_prune_by_age_only_touches_ended_sessions(store: SessionDB) -> None:
    await ended(store, "old", age_days=100, messages=1)
    await ended(store, "recent", age_days=10, messages=1)
    await store.create_session("open-old", "cli")
    await set_columns(store, "open-old", started_at=time.time() - 200 * DAY)
    await ended(store, "old-start-new-msg", age_days=100)
    await store.append_message("old-start-new-msg", "user", "just now")
    await store.create_session("child", "cli", parent_session_id="old")
    await store.end_session("child", "done")  # recent, survives, detached
    candidates = await store.list_prune_candidates(older_than_days=90)
    assert [c["id"] for c in candidates] == ["old"]
    assert list(candidates[0]) == ["id", "source", "title", "model", "started_at", "last_active", "ended_at",
                                  "message_count", "archived"]
    assert await store.prune_sessions() == 1
    assert await existing(store, "old", "recent", "open-old", "old-start-new-msg", "child") == [
        "recent", "open-old", "old-start-new-msg", "child"]
    assert (await store.get_session("child") or {})["parent_session_id"] is None
    assert await store.prune_sessions(older_than_days=5) == 1  # "recent"; the rest are open or fresh


async def test_prune_filter_set(store: SessionDB) -> None:
    await ended(store, "a", age_days=1, messages=3, model="GPT-big", cwd="/w/p_1")
    await set_columns(store, "a", title="Deploy 100% done", billing_provider="OpenAI", user_id="u1", chat_id="c1",
                chat_type="dm", git_branch="feature/x", input_tokens=500, output_tokens=500, estimated_cost_usd=2.0,
                tool_call_count=4, end_reason="user_exit")
    await ended(store, "b", age_days=1, messages=1, model="small", cwd="/w/p11", source="tui")
    await set_columns(store, "b", title="Deploy 1000 done", archived=1, actual_cost_usd=0.5, estimated_cost_usd=9.0)

    async def matches(**filters: Any) -> list[str]:
        return [c["id"] for c in await store.list_prune_candidates(**filters)]

    assert await matches() == ["a", "b"]
    assert await matches(source="tui") == ["b"]
    assert await matches(title_like="100%") == ["a"]  # % is a literal character
    assert await matches(title_like="DEPLOY") == ["a", "b"]
    assert await matches(cwd_prefix="/w/p_1") == ["a"]  # _ is a literal character
    assert await matches(min_messages=2) == ["a"]
    assert await matches(max_messages=2) == ["b"]
    assert await matches(archived=True) == ["b"]
    assert await matches(archived=False) == ["a"]
    assert await matches(model_like="gpt") == ["a"]
    assert await matches(provider="openai") == ["a"]
    assert await matches(user_id="u1", chat_id="c1", chat_type="dm") == ["a"]
    assert await matches(branch_like="FEATURE") == ["a"]
    assert await matches(min_tokens=1000) == ["a"]
    assert await matches(max_tokens=999) == ["b"]
    assert await matches(min_cost=1.0) == ["a"]  # b's actual cost wins over its estimate
    assert await matches(max_cost=1) == ["b"]
    assert await matches(min_tool_calls=4, max_tool_calls=4) == ["a"]
    assert await matches(end_reason="user_exit") == ["a"]
    assert await matches(started_after=time.time() - 2 * DAY, started_before=time.time()) == ["a", "b"]
    assert await matches(last_active_after=time.time()) == []
    assert await matches(older_than_days=0.5) == ["a", "b"]
    assert await matches(older_than_days=2) == []
    assert await matches(older_than_days=2, last_active_before=time.time()) == ["a", "b"]  # explicit cutoff wins
    assert await store.archive_sessions(title_like="deploy") == 1  # archived=False by default
    assert (await store.get_session("a") or {})["archived"] == 1
    assert await store.prune_sessions(older_than_days=None, provider="openai") == 1
    assert await existing(store, "a", "b") == ["b"]


async def test_bad_retention_arguments(store: SessionDB) -> None:
    await ended(store, "keep", age_days=1)
    with pytest.raises(ValueError, match="older_than_days must be non-negative"):
        await store.prune_sessions(older_than_days=-1)  # would otherwise prune everything ended
    with pytest.raises(TypeError, match="unknown session filter"):
        await store.prune_sessions(title_contains="x")
    with pytest.raises(TypeError, match="min_messages"):
        await store.list_prune_candidates(min_messages="3")
    with pytest.raises(TypeError, match="archived"):
        await store.archive_sessions(archived="no")
    with pytest.raises(TypeError, match="older_than_days"):
        await store.prune_sessions(older_than_days="90")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        await store.prune_sessions(older_than_days=float("nan"))
    with pytest.raises(TypeError, match="sessions_dir"):
        await store.prune_sessions(sessions_dir=5)  # type: ignore[arg-type]
    assert await existing(store, "keep") == ["keep"]


async def test_archive_stale_sessions_follows_lineages(store: SessionDB) -> None:
    old = time.time() - 10 * DAY
    for sid in ("root", "pinned", "fresh", "quiet"):
        await store.create_session(sid, "cli")
        await set_columns(store, sid, started_at=old)
    await store.end_session("root", "compression")
    await store.create_session("tip", "cli", parent_session_id="root")
    await set_columns(store, "tip", started_at=old + 1)
    await set_columns(store, "pinned", pinned=1)
    await store.touch_session_activity("fresh", time.time())
    await store.touch_session_activity("quiet", old)
    assert await store.archive_stale_sessions(3) == 2  # tip (taking its root along) and quiet
    flags = {s: (await store.get_session(s) or {})["archived"] for s in ("root", "tip", "pinned", "fresh", "quiet")}
    assert flags == {"root": 1, "tip": 1, "pinned": 0, "fresh": 0, "quiet": 1}
    assert await store.archive_stale_sessions(3, exclude_pinned=False) == 1
    assert await store.archive_stale_sessions(None) == 0
    assert await store.archive_stale_sessions(-1) == 0
    with pytest.raises(TypeError, match="idle_days"):
        await store.archive_stale_sessions("3")  # type: ignore[arg-type]


async def test_auto_prune_and_archive_are_throttled_and_never_raise(store: SessionDB) -> None:
    await ended(store, "old", age_days=100, messages=2)
    await ended(store, "new", age_days=1)
    result = await store.maybe_auto_prune_and_vacuum(retention_days=90)
    assert result == {"skipped": False, "pruned": 1, "vacuumed": True}
    assert float(await store.get_meta("last_auto_prune") or 0) > time.time() - 60
    assert await store.get_meta("last_vacuum") is not None
    assert await store.maybe_auto_prune_and_vacuum(retention_days=90) == {
        "skipped": True, "pruned": 0, "vacuumed": False}
    await store.set_meta("last_auto_prune", "not a number")
    await ended(store, "old2", age_days=100)
    second = await store.maybe_auto_prune_and_vacuum(retention_days=90)
    assert second == {"skipped": False, "pruned": 1, "vacuumed": False}  # VACUUM is not due yet
    await store.set_meta("last_auto_prune", "0")
    bad = await store.maybe_auto_prune_and_vacuum(retention_days=-5)
    assert bad["pruned"] == 0 and "non-negative" in bad["error"]

    await store.create_session("idle", "cli")
    await set_columns(store, "idle", started_at=time.time() - 10 * DAY)
    assert await store.maybe_auto_archive(idle_days=3) == {"skipped": False, "archived": 1}
    assert await store.maybe_auto_archive(idle_days=3) == {"skipped": True, "archived": 0}
    assert await store.get_meta("last_auto_archive") is not None
    await store.close()
    closed = await store.maybe_auto_archive(min_interval_hours=0)
    assert "closed" in closed["error"]


# ------------------------------------------------------------------- storage


async def fill_and_clear(store: SessionDB) -> int:
    """Write about 1.7 MB of messages, delete them again; returns the logical size while they were there."""
    await store.create_session("big", "cli")
    text = "lorem ipsum dolor sit amet " * 40
    await store.append_messages_batch("big", [{"role": "user", "content": f"{i} {text}"} for i in range(1500)])
    before = await store.logical_size_bytes()
    assert before is not None and before > 1_000_000
    await store.clear_messages("big")
    return before


@pytest.mark.backends("sqlite")  # FTS5 tables and the file's own integrity check; PostgreSQL twin below
async def test_vacuum_reclaims_space_and_logical_size(store: SessionDB) -> None:
    before = await fill_and_clear(store)
    assert await store.vacuum() == 2  # messages_fts + messages_fts_trigram
    after = await store.logical_size_bytes()
    assert after is not None and after < before / 3
    assert (await fetch_rows(store, "PRAGMA integrity_check"))[0][0] == "ok"
    await store.append_message("big", "user", "still writable after vacuum")
    assert await store.message_count("big") == 1


_GIN_PENDING_SQL = (
    "SELECT c.relname, (pgstatginindex(c.oid)).pending_pages FROM pg_index AS i "
    "JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS am ON am.oid = c.relam "
    "WHERE i.indrelid = 'messages'::regclass AND am.amname = 'gin' ORDER BY c.relname"
)


async def test_vacuum_merges_search_indexes_and_analyzes_postgres(pg_admin_dsn: str) -> None:
    # A database of its own: what VACUUM may remove is bounded by the oldest snapshot
    # in the database, and other runs keep transactions open in the shared one.
    import asyncpg

    from hermes_state.postgres import SessionDB as PostgresSessionDB

    from .postgres_support import store_dsn, temporary_database

    async for url in temporary_database(pg_admin_dsn):
        store = PostgresSessionDB(store_dsn(url))
        inspect = await asyncpg.connect(url)
        try:
            await store.get_meta("open")  # creates the schema
            # pgstattuple reads the GIN pending lists without merging them.
            await inspect.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            before = await fill_and_clear(store)
            pending = await inspect.fetch(_GIN_PENDING_SQL)
            assert ("messages_hermes_search_idx", True) in [(r[0], r[1] > 0) for r in pending]
            assert await inspect.fetchval("SELECT pg_relation_size('messages')") > 1_000_000

            assert await store.vacuum() == len(pending)  # every search index's pending list merged

            assert [(r[0], r[1]) for r in await inspect.fetch(_GIN_PENDING_SQL)] == [(r[0], 0) for r in pending]
            stats = await inspect.fetchrow(
                "SELECT last_vacuum IS NOT NULL, last_analyze IS NOT NULL FROM pg_stat_user_tables "
                "WHERE relid = 'messages'::regclass"
            )
            assert tuple(stats) == (True, True)
            # Every deleted row was removable, so the emptied heap is truncated to nothing.
            assert await inspect.fetchval("SELECT pg_relation_size('messages')") == 0
            after = await store.logical_size_bytes()
            assert after is not None and after < before / 2
            await store.append_message("big", "user", "still writable after vacuum")
            assert await store.message_count("big") == 1
        finally:
            await inspect.close()
            await store.close()


@pytest.mark.backends("sqlite")  # a SQLite file lock held by another connection
async def test_vacuum_busy_file_fails_fast(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    blocker = driver_module().connect(str(store.db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await store.vacuum()
        assert time.monotonic() - started < 10
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.vacuum() == 2
