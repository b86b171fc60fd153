"""Compression leases, the append guard, in-place compaction, child publication, cooldowns, rewind."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_state import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    SessionCompressionInProgressError,
    SessionDB,
)
from hermes_state.sqlite.driver import driver_module

from .raw_sql import fetch_rows
from .raw_sql import raw_exec as store_exec


def raw_rows(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    # The store's own SQLite library, so file locks of both connections see each other.
    with closing(driver_module().connect(str(db_path), timeout=10)) as conn:
        return conn.execute(sql, params).fetchall()


def raw_exec(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    with closing(driver_module().connect(str(db_path), timeout=10)) as conn:
        conn.execute(sql, params)
        conn.commit()


async def seed(db: SessionDB, session_id: str = "s", turns: int = 4, **kwargs: Any) -> list[int]:
    await db.create_session(session_id, "cli", **kwargs)
    ids = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(await db.append_message(session_id, role, f"turn {i} about kubernetes"))
    return ids


# ---------------------------------------------------------------------- leases


async def test_acquire_is_exclusive_and_reacquire_does_not_extend(store: SessionDB) -> None:
    assert await store.try_acquire_compression_lock("s", "holder-a", ttl_seconds=60)
    assert not await store.try_acquire_compression_lock("s", "holder-b", ttl_seconds=60)
    assert await store.get_compression_lock_holder("s") == "holder-a"
    (expires_before,) = (await fetch_rows(store, "SELECT expires_at FROM compression_locks WHERE session_id = 's'"))[0]
    await asyncio.sleep(0.01)
    assert await store.try_acquire_compression_lock("s", "holder-a", ttl_seconds=600)
    (expires_after,) = (await fetch_rows(store, "SELECT expires_at FROM compression_locks WHERE session_id = 's'"))[0]
    assert expires_after == expires_before
    # Leases do not need the session to exist.
    assert await store.get_session("s") is None


async def test_refresh_extends_only_for_the_owner(store: SessionDB) -> None:
    assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=1)
    assert not await store.refresh_compression_lock("s", "b", ttl_seconds=100)
    assert await store.refresh_compression_lock("s", "a", ttl_seconds=100)
    (expires,) = (await fetch_rows(store, "SELECT expires_at FROM compression_locks"))[0]
    assert expires > time.time() + 90
    assert not await store.refresh_compression_lock("other", "a")


async def test_refresh_revives_an_expired_unreclaimed_lease(store: SessionDB) -> None:
    assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=0.05)
    await asyncio.sleep(0.1)
    assert await store.get_compression_lock_holder("s") is None  # expired reads as free
    assert await store.refresh_compression_lock("s", "a", ttl_seconds=60)
    assert await store.get_compression_lock_holder("s") == "a"
    assert not await store.try_acquire_compression_lock("s", "b")


async def test_expired_lease_is_taken_over(store: SessionDB) -> None:
    assert await store.try_acquire_compression_lock("s", "a", ttl_seconds=0.05)
    await asyncio.sleep(0.1)
    assert await store.try_acquire_compression_lock("s", "b", ttl_seconds=60)
    assert await store.get_compression_lock_holder("s") == "b"
    assert not await store.refresh_compression_lock("s", "a")


async def test_release_only_by_the_owner(store: SessionDB) -> None:
    assert await store.try_acquire_compression_lock("s", "a")
    await store.release_compression_lock("s", "b")
    assert await store.get_compression_lock_holder("s") == "a"
    await store.release_compression_lock("s", "a")
    assert await store.get_compression_lock_holder("s") is None
    await store.release_compression_lock("s", "a")  # idempotent
    assert await store.try_acquire_compression_lock("s", "b")


async def test_holder_naming_a_live_process_is_not_reclaimed(store: SessionDB) -> None:
    # pid 1 always exists; our own pid is never treated as dead either.
    import os

    for holder in ("pid=1:task=t:agent=aa:nonce=00000001", f"pid={os.getpid()}:task=t"):
        assert await store.try_acquire_compression_lock(holder, holder, ttl_seconds=60)
        assert not await store.try_acquire_compression_lock(holder, "intruder")


async def test_blank_lease_arguments_do_no_io(db_path: Path) -> None:
    db = SessionDB(db_path)
    assert await db.try_acquire_compression_lock("", "h") is False
    assert await db.try_acquire_compression_lock("s", "") is False
    assert await db.refresh_compression_lock("", "h") is False
    assert await db.release_compression_lock("s", "") is None
    assert await db.get_compression_lock_holder("") is None
    assert not db_path.exists()
    with pytest.raises(TypeError, match="holder must be a str"):
        await db.try_acquire_compression_lock("s", 42)  # type: ignore[arg-type]
    await db.close()


async def test_lease_calls_after_close_raise(db_path: Path) -> None:
    db = SessionDB(db_path)
    await db.try_acquire_compression_lock("s", "a")
    await db.close()
    for call in (
        db.try_acquire_compression_lock("s", "a"),
        db.refresh_compression_lock("s", "a"),
        db.get_compression_lock_holder("s"),
    ):
        with pytest.raises(RuntimeError, match="SessionDB is closed"):
            await call


async def test_read_only_store_cannot_take_a_lease(db_path: Path) -> None:
    async with SessionDB(db_path) as writer:
        await writer.create_session("s", "cli")
    reader = SessionDB(db_path, read_only=True)
    try:
        assert await reader.try_acquire_compression_lock("s", "a") is False
        assert await reader.refresh_compression_lock("s", "a") is False
        assert await reader.get_compression_lock_holder("s") is None
    finally:
        await reader.close()


# ----------------------------------------------- appends and compression leases


async def test_append_is_never_blocked_by_a_foreign_compression_lock(store: SessionDB) -> None:
    """Upstream 2026-08: a compression lease serializes compressions only; the watermark keeps appends."""
    await seed(store)
    assert await store.try_acquire_compression_lock("s", "owner", ttl_seconds=60)
    own = await store.append_message("s", "assistant", "owner write", compression_lock_holder="owner")
    started = time.monotonic()
    foreign = await store.append_message("s", "user", "foreign write")
    batch = await store.append_messages_batch("s", [{"role": "user", "content": "batch write"}])
    assert time.monotonic() - started < 0.5
    assert own < foreign and batch == 1
    contents = [m["content"] for m in await store.get_messages("s")]
    assert contents[-3:] == ["owner write", "foreign write", "batch write"]
    assert await store.get_compression_lock_holder("s") == "owner"  # the lease itself is untouched


async def test_append_is_never_blocked_by_a_stale_lock(store: SessionDB) -> None:
    await seed(store)
    # A crashed compressor's long lease: a pid that is gone, an hour left on the clock.
    assert await store.try_acquire_compression_lock("s", "pid=999999:task=t", ttl_seconds=3600)
    started = time.monotonic()
    await store.append_message("s", "user", "lands at once")
    assert time.monotonic() - started < 0.5
    assert (await store.get_messages("s"))[-1]["content"] == "lands at once"


async def test_the_lease_still_serializes_compressions(store: SessionDB) -> None:
    await seed(store)
    assert await store.try_acquire_compression_lock("s", "first", ttl_seconds=60)
    assert not await store.try_acquire_compression_lock("s", "second", ttl_seconds=60)
    with pytest.raises(CompressionSessionBusyError):
        await store.publish_compression_child(
            parent_session_id="s", child_session_id="c", source="cli",
            messages=[{"role": "user", "content": "summary"}], compression_lock_holder="second",
        )
    started = time.monotonic()
    with pytest.raises(SessionCompressionInProgressError, match="lost before commit"):
        await store.archive_and_compact("s", [{"role": "user", "content": "summary"}], lock_holder="second")
    assert time.monotonic() - started < 0.5  # a lost lease is permanent: never retried
    assert [m["content"] for m in await store.get_messages("s")] == [f"turn {i} about kubernetes" for i in range(4)]


# ----------------------------------------------------------------- compaction


async def test_archive_and_compact_in_place(store: SessionDB) -> None:
    old_ids = await seed(store, turns=6)
    summary = [
        {"role": "user", "content": "[CONTEXT SUMMARY]: six turns about kubernetes"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "t", "arguments": "{}"}}]},
    ]
    assert await store.archive_and_compact("s", summary) == 2
    session = await store.get_session("s")
    assert session is not None
    assert session["id"] == "s" and session["ended_at"] is None
    assert session["message_count"] == 2 and session["tool_call_count"] == 1
    active = await store.get_messages("s")
    assert [m["content"] for m in active] == ["[CONTEXT SUMMARY]: six turns about kubernetes", "ok"]
    assert all(m["id"] > max(old_ids) for m in active)
    everything = await store.get_messages("s", include_inactive=True)
    archived = [m for m in everything if m["id"] in old_ids]
    assert [(m["active"], m["compacted"]) for m in archived] == [(0, 1)] * 6
    assert await store.message_count("s") == 8
    # A second compaction archives the first summary too.
    assert await store.archive_and_compact("s", [{"role": "user", "content": "again"}]) == 1
    states = {m["content"]: (m["active"], m["compacted"]) for m in await store.get_messages("s", include_inactive=True)}
    assert states["ok"] == (0, 1) and states["again"] == (1, 0)


@pytest.mark.backends("sqlite")  # inspects SQLite's FTS5 table; search of archived rows on PostgreSQL is search's
async def test_archived_rows_stay_in_the_full_text_index(store: SessionDB, db_path: Path) -> None:
    old_ids = await seed(store, turns=6)
    await store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    # Default search shows compacted history, so archived rows keep their index entries.
    hits = {r[0] for r in raw_rows(db_path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'kubernetes'")}
    assert set(old_ids) <= hits


async def test_compaction_double_encodes_string_sidecars(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    message = {
        "role": "assistant", "content": "x", "reasoning": "thinking", "reasoning_details": "already-json",
        "codex_reasoning_items": [{"id": "r1"}], "reasoning_content": "",
    }
    await store.archive_and_compact("s", [message, {"role": "user", "content": "u", "reasoning_details": "ignored"}])
    await store.append_messages_batch("s", [message])
    compacted, user, batch = await store.get_messages("s")
    assert compacted["reasoning_details"] == json.dumps("already-json")  # the reference's quirk, kept
    assert batch["reasoning_details"] == "already-json"  # other writers store strings verbatim
    assert compacted["codex_reasoning_items"] == json.dumps([{"id": "r1"}])
    assert compacted["reasoning"] == "thinking" and compacted["reasoning_content"] == ""
    assert user["reasoning_details"] is None  # sidecars only on assistant rows
    replayed = (await store.get_messages_as_conversation("s"))[0]
    assert replayed["reasoning_details"] == "already-json"


async def test_compaction_patches_model_config(store: SessionDB) -> None:
    await store.create_session("s", "cli", model_config={"keep": 1, "drop": 2})
    await store.archive_and_compact("s", [{"role": "user", "content": "x"}], {"drop": None, "new": {"a": [1]}})
    session = await store.get_session("s")
    assert session is not None and json.loads(session["model_config"]) == {"keep": 1, "new": {"a": [1]}}
    with pytest.raises(RuntimeError, match="^Session not found: ghost$"):
        await store.archive_and_compact("ghost", [], {"a": 1})
    with pytest.raises(TypeError, match="model_config_patch"):
        await store.archive_and_compact("s", [], ["not", "a", "dict"])  # type: ignore[arg-type]


async def test_compaction_of_unknown_session(store: SessionDB) -> None:
    assert await store.archive_and_compact("ghost", []) == 0
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        await store.archive_and_compact("ghost", [{"role": "user", "content": "x"}])
    assert await store.message_count() == 0


async def test_failed_compaction_leaves_the_transcript_alone(store: SessionDB) -> None:
    ids = await seed(store)
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        await store.archive_and_compact("s", [{"role": "user", "content": "ok"}, "not a dict"])  # type: ignore[list-item]
    rows = await store.get_messages("s")
    assert [m["id"] for m in rows] == ids and all(m["compacted"] == 0 for m in rows)


# --------------------------------------------------------------- publication


async def test_publish_child_copies_identity_and_ends_parent(store: SessionDB) -> None:
    await seed(
        store, "p", turns=2, user_id="u1", session_key="k1", chat_id="c1", chat_type="dm", thread_id="t1",
        cwd="/work/a", profile_name="prof", git_repo_root="/work", origin_json='{"o": 1}', display_name="Ann",
    )
    await store_exec(store, "UPDATE sessions SET git_branch = 'main' WHERE id = 'p'")
    assert await store.try_acquire_compression_lock("p", "h")
    handoff = [
        {"role": "user", "content": "summary"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
    ]
    await store.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="telegram", messages=handoff, model="m2",
        model_config={"max_iterations": 3}, system_prompt="SYS", compression_lock_holder="h",
    )
    parent, child = await store.get_session("p"), await store.get_session("c")
    assert parent is not None and child is not None
    assert parent["end_reason"] == "compression" and parent["ended_at"] is not None
    assert child["parent_session_id"] == "p" and child["ended_at"] is None
    assert (child["source"], child["model"], child["system_prompt"]) == ("telegram", "m2", "SYS")
    assert json.loads(child["model_config"]) == {"max_iterations": 3}
    for column in ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "cwd", "profile_name",
                   "git_repo_root", "git_branch", "origin_json", "display_name"):
        assert child[column] == parent[column], column
    assert (child["message_count"], child["tool_call_count"]) == (2, 2)
    assert [m["content"] for m in await store.get_messages("c")] == ["summary", None]
    assert len(await store.get_messages("p")) == 2  # the parent keeps its rows
    # The parent now refuses transcript writes, the lease owner's included.
    with pytest.raises(CompressionSessionClosedError):
        await store.append_message("p", "user", "late", compression_lock_holder="h")
    await store.release_compression_lock("p", "h")
    with pytest.raises(CompressionSessionClosedError) as closed:
        await store.append_message("p", "user", "late")
    assert closed.value.session_id == "p"
    assert str(closed.value) == (
        "Session 'p' is closed by compression; adopt its live continuation before appending messages"
    )
    with pytest.raises(CompressionSessionClosedError):
        await store.replace_messages("p", [])
    assert await store.get_compression_tip("p") == "c"
    assert await store.resolve_resume_session_id("p") == "c"


async def test_publish_overrides_cwd_and_profile(store: SessionDB) -> None:
    await seed(store, "p", turns=1, cwd="/old", profile_name="old")
    await store.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="cli", messages=[{"role": "user", "content": "x"}],
        cwd="/new", profile_name="new", require_compression_lease=False,
    )
    child = await store.get_session("c")
    assert child is not None and (child["cwd"], child["profile_name"]) == ("/new", "new")


async def test_publish_requires_the_live_lease(store: SessionDB) -> None:
    await seed(store, "p", turns=1)
    msgs = [{"role": "user", "content": "x"}]
    lost = "^Compression lease lost before publication: p$"
    with pytest.raises(CompressionSessionBusyError, match=lost):
        await store.publish_compression_child(parent_session_id="p", child_session_id="c", source="cli", messages=msgs)
    assert await store.try_acquire_compression_lock("p", "h", ttl_seconds=0.1)
    for holder in (None, "someone-else"):
        with pytest.raises(CompressionSessionBusyError, match=lost):
            await store.publish_compression_child(
                parent_session_id="p", child_session_id="c", source="cli", messages=msgs,
                compression_lock_holder=holder,
            )
    await asyncio.sleep(0.15)
    started = time.monotonic()
    with pytest.raises(CompressionSessionBusyError, match=lost):
        await store.publish_compression_child(
            parent_session_id="p", child_session_id="c", source="cli", messages=msgs, compression_lock_holder="h"
        )
    assert time.monotonic() - started < 2.0  # fails fast, never retried like the append guard
    parent = await store.get_session("p")
    assert parent is not None and parent["ended_at"] is None and await store.get_session("c") is None


async def test_publish_errors(store: SessionDB, db_path: Path) -> None:
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(RuntimeError, match="^Compression child handoff must not be empty$"):
        await SessionDB(db_path.parent / "never.db").publish_compression_child(
            parent_session_id="p", child_session_id="c", source="cli", messages=[]
        )
    assert not (db_path.parent / "never.db").exists()
    with pytest.raises(RuntimeError, match="^Compression parent not found: p$"):
        await store.publish_compression_child(
            parent_session_id="p", child_session_id="c", source="cli", messages=msgs, require_compression_lease=False
        )
    await seed(store, "p", turns=1)
    await seed(store, "taken", turns=1)
    with pytest.raises(sqlite3.IntegrityError):
        await store.publish_compression_child(
            parent_session_id="p", child_session_id="taken", source="cli", messages=msgs,
            require_compression_lease=False,
        )
    parent = await store.get_session("p")
    assert parent is not None and parent["ended_at"] is None  # all or nothing
    assert len(await store.get_messages("taken")) == 1
    await store.end_session("p", "agent_close")
    with pytest.raises(RuntimeError, match="^Compression parent already ended: p$"):
        await store.publish_compression_child(
            parent_session_id="p", child_session_id="c", source="cli", messages=msgs, require_compression_lease=False
        )


# ------------------------------------------------------- cooldowns and counters


async def test_cooldown_record_read_clear(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    assert await store.get_compression_failure_cooldown("s") is None
    until = time.time() + 60
    await store.record_compression_failure_cooldown("s", until, "provider 500")
    cooldown = await store.get_compression_failure_cooldown("s")
    assert cooldown is not None and cooldown["cooldown_until"] == until and cooldown["error"] == "provider 500"
    assert 0 < cooldown["remaining_seconds"] <= 60
    await store.record_compression_failure_cooldown("s", time.time() - 1, "old")
    assert await store.get_compression_failure_cooldown("s") is None  # expired
    row = await store.get_compression_failure_cooldown_row("s")
    assert row["session_exists"] and row["error"] == "old" and row["cooldown_until"] is not None
    await store.clear_compression_failure_cooldown("s")
    assert await store.get_compression_failure_cooldown_row("s") == {
        "session_exists": True, "cooldown_until": None, "error": None,
    }
    assert await store.get_compression_failure_cooldown_row("ghost") == {
        "session_exists": False, "cooldown_until": None, "error": None,
    }
    await store.record_compression_failure_cooldown("ghost", until)  # unknown session: no-op
    assert await store.get_compression_failure_cooldown("") is None


async def test_cooldown_snapshot_restore(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.record_compression_failure_cooldown("s", 123.5, "boom")
    snapshot = await store.get_compression_failure_cooldown_row("s")
    await store.record_compression_failure_cooldown("s", time.time() + 999, "newer")
    await store.restore_compression_failure_cooldown_row("s", snapshot)
    assert await store.get_compression_failure_cooldown_row("s") == snapshot
    absent = await store.get_compression_failure_cooldown_row("ghost")
    await store.restore_compression_failure_cooldown_row("ghost", absent)  # still absent: fine
    with pytest.raises(RuntimeError, match="session now exists"):
        await store.restore_compression_failure_cooldown_row("s", absent)
    await store.delete_session("s")
    with pytest.raises(RuntimeError, match="^compression cooldown rollback session missing: s$"):
        await store.restore_compression_failure_cooldown_row("s", snapshot)


async def test_compressor_counters(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    assert await store.get_compression_fallback_streak("s") == 0
    await store.set_compression_fallback_streak("s", 3)
    await store.set_compression_ineffective_count("s", -4)
    assert await store.get_compression_fallback_streak("s") == 3
    assert await store.get_compression_ineffective_count("s") == 0
    await store.set_compression_ineffective_count("s", 2.0)  # type: ignore[arg-type]
    assert await store.get_compression_ineffective_count("s") == 2
    assert await store.get_compression_fallback_streak("ghost") == 0
    assert await store.get_compression_ineffective_count("") == 0
    with pytest.raises(TypeError):
        await store.set_compression_fallback_streak("s", True)  # type: ignore[arg-type]


# ------------------------------------------------------------------- rewind


async def test_rewind_and_restore(store: SessionDB) -> None:
    ids = await seed(store, turns=6)
    result = await store.rewind_to_message("s", ids[2])
    assert result["rewound_count"] == 4 and result["new_head_id"] == ids[1]
    assert result["target_message"]["id"] == ids[2] and result["target_message"]["content"] == "turn 2 about kubernetes"
    assert [m["id"] for m in await store.get_messages("s")] == ids[:2]
    session = await store.get_session("s")
    assert session is not None and session["rewind_count"] == 1 and session["message_count"] == 6
    assert await store.restore_rewound("s", ids[4]) == 2
    assert [m["id"] for m in await store.get_messages("s")] == [*ids[:2], *ids[4:]]
    first = await store.rewind_to_message("s", ids[0])
    assert first["new_head_id"] is None and first["rewound_count"] == 4


async def test_rewind_errors_and_compacted_restore(store: SessionDB) -> None:
    ids = await seed(store, turns=2)
    with pytest.raises(ValueError, match="^message 999 not found in session s$"):
        await store.rewind_to_message("s", 999)
    with pytest.raises(ValueError, match=rf"^rewind target must be a 'user' message \(got role='assistant', id={ids[1]}\)$"):
        await store.rewind_to_message("s", ids[1])
    await seed(store, "other", turns=1)
    with pytest.raises(ValueError, match="not found in session other"):
        await store.rewind_to_message("other", ids[0])
    with pytest.raises(TypeError):
        await store.rewind_to_message("s", "1")  # type: ignore[arg-type]
    await store.archive_and_compact("s", [{"role": "user", "content": "sum"}])
    assert await store.restore_rewound("s", 0) == 2  # compacted rows come back too
    assert len(await store.get_messages("s")) == 3


def test_exception_classes_of_the_reference() -> None:
    import hermes_state

    assert issubclass(hermes_state.SessionCompressionInProgressError, hermes_state.CompressionSessionBusyError)
    assert issubclass(hermes_state.CompressionSessionBusyError, RuntimeError)
    assert issubclass(hermes_state.CompressionSessionClosedError, RuntimeError)
    assert issubclass(hermes_state.SessionResumeTooLargeError, ValueError)
    assert issubclass(hermes_state.SessionExportTooLargeError, ValueError)
    assert issubclass(hermes_state.WalUnsupportedError, sqlite3.OperationalError)
    busy = SessionCompressionInProgressError("x")
    assert (busy.session_id, str(busy)) == ("x", "Session 'x' is being compressed by another writer")
    assert hermes_state.classify_persistence_error(busy) == "compression"
    assert hermes_state.classify_persistence_error(CompressionSessionBusyError("Compression lease lost")) == "compression"
    closed = CompressionSessionClosedError("x")
    assert closed.session_id == "x"
