"""Opening PostgreSQL databases of other layouts: migrated in place, atomically, or refused untouched.

Each source layout is built in the test's own schema with raw DDL
(``tests/upstream_pg.py`` for async-hermes-agent's, degraded copies of ours
for earlier hermes-state releases), filled the way its writer filled it,
then opened with the store. Reads must give back what the old reader gave,
writes must work, a second open must run no DDL, a failure must leave
nothing behind, and a shape the store does not know must be refused with
nothing changed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionTurnLeaseLostError
from hermes_state.postgres import SessionDB
from hermes_state.postgres.layout import LAYOUT, LAYOUT_KEY, ORIGIN_KEY, UPSTREAM_KEY
from hermes_state.postgres.schema import SCHEMA_VERSION, TABLES

from .postgres_support import schema_connect
from .upstream_pg import LAYOUTS, UpstreamWriter, build_layout, upstream_message, upstream_session

pytestmark = pytest.mark.backends("postgres")

# A snapshot of the schema's catalog rows and data: equal before and after means nothing changed.
_SNAPSHOT_SQL = (
    "SELECT c.relname, c.relkind::text, c.xmin::text, c.relfilenode::text FROM pg_class AS c "
    "WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1",
    "SELECT a.attrelid::regclass::text, a.attname, a.xmin::text FROM pg_attribute AS a "
    "JOIN pg_class AS c ON c.oid = a.attrelid WHERE c.relnamespace = current_schema()::regnamespace "
    "AND a.attnum > 0 ORDER BY 1, 2",
    "SELECT conname, xmin::text FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1",
    "SELECT proname, xmin::text FROM pg_proc WHERE pronamespace = current_schema()::regnamespace ORDER BY 1",
    "SELECT t.tgname, t.xmin::text FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid "
    "WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1",
)


async def catalog_snapshot(conn: Any) -> list[Any]:
    """Catalog rows (with their xmin: any DDL rewrites one) of the schema."""
    return [[tuple(r) for r in await conn.fetch(sql)] for sql in _SNAPSHOT_SQL]


async def data_snapshot(conn: Any) -> dict[str, list[str]]:
    """Every row of every table of the schema, as text."""
    tables = [r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    return {t: sorted(r[0] for r in await conn.fetch(f'SELECT t::text FROM "{t}" AS t')) for t in sorted(tables)}


def same(a: Any, b: Any) -> bool:
    """Equality that takes NaN as equal to NaN (upstream could store it in structured content)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b if isinstance(a, (bool, int, float)) else a == b


# ------------------------------------------------------------------ async-hermes-agent layouts

STRUCTURED = [
    {"nested": ["value", 1], "z": {"b": 2, "a": 1}},  # key order kept
    [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
    42, 2.5, True, 2**70, float("nan"),
]


async def populate(conn: Any, layout: str) -> UpstreamWriter:
    """Rows of every kind upstream wrote: prompts, titles, structured content, compaction, lineage, usage, leases."""
    w = UpstreamWriter(conn)
    await w.create_session("s-main", "cli", model="gpt-x", cwd="/work/repo", system_prompt="be brief",
                           model_config={"temperature": 0, "nested": {"keep": True}}, user_id="u1")
    await w.append("s-main", "user", "hello there [not json")
    await w.append("s-main", "user", '{"a": 1} is text, not structure')
    await w.append("s-main", "assistant", {"answer": "structured"}, tool_calls=[{"id": "call-1", "type": "function"}],
                   reasoning="thinking", reasoning_details=[{"type": "summary", "text": "r"}], token_count=17,
                   finish_reason="tool_calls")
    await w.append("s-main", "tool", "file contents", tool_name="shell", tool_call_id="call-1")
    await w.append("s-main", "assistant", None, tool_calls=[{"id": "call-2"}], platform_message_id="p-9",
                   display_metadata={"kind": "card"})
    for value in STRUCTURED:
        await w.append("s-main", "user", value)
    await w.update("s-main", title="Main work", title_source="user")
    # A direct column UPDATE upstream's reader never saw: it read the model from the snapshot.
    await conn.execute("UPDATE sessions SET model = 'drifted' WHERE id = 's-main'")
    await w.usage("s-main", model="gpt-x", task="", input_tokens=10, estimated_cost_usd=0.5)
    await w.usage("s-main", model="gpt-x", task="", input_tokens=5, estimated_cost_usd=0.25)
    await w.usage("s-main", model=None, task="title", input_tokens=3, estimated_cost_usd=0.0, provider="openai")

    # In-place compaction: old rows archived (active 0, compacted 1), a summary appended.
    await w.create_session("s-compact", "telegram", model="gpt-y")
    for i in range(4):
        await w.append("s-compact", "user", f"old turn {i}")
    await w.compact("s-compact", [{"role": "user", "content": "SUMMARY of four turns"}])
    await w.append("s-compact", "assistant", "after compaction")

    # A compression lineage: the root ended by compression, its continuation.
    await w.create_session("s-root", "cli", session_key="k1")
    await w.append("s-root", "user", "root turn")
    await w.update("s-root", ended_at=w.tick(), end_reason="compression")
    await w.create_session("s-tip", "cli", parent_session_id="s-root", session_key="k1")
    await w.append("s-tip", "user", "tip turn")

    if layout == "anchor":  # titles were only an application check there
        await w.create_session("s-dup-old", "cli")
        await w.update("s-dup-old", title="Shared", title_source="user")
        await w.create_session("s-dup-new", "cli")
        await w.update("s-dup-new", title="Shared", title_source="llm")
    if any("async_delegations" in s for s in LAYOUTS[layout][1]):
        await conn.execute(
            "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at, updated_at, "
            "owner_instance_id, lease_expires_at) VALUES ('d1', 's-main', 'running', 1, 2, '7:abc', 3)"
        )
    if any("session_turn_leases" in s for s in LAYOUTS[layout][1]):
        await w.lease("s-main", "pid=1:worker=a", ttl=600)
        await w.lease("s-compact", "pid=2:worker=b", ttl=-5)  # expired
    return w


async def upstream_reads(conn: Any, layout: str) -> tuple[dict[str, Any], dict[int, Any]]:
    """What upstream's readers returned for every session and message of the schema."""
    anchor = layout == "anchor"
    sessions = {r["id"]: upstream_session(dict(r), anchor=anchor) for r in await conn.fetch("SELECT * FROM sessions")}
    messages = {r["id"]: upstream_message(dict(r)) for r in await conn.fetch("SELECT * FROM messages")}
    return sessions, messages


async def upstream_schema(conn: Any, layout: str) -> tuple[dict[str, Any], dict[int, Any]]:
    """Build ``layout``, fill it as upstream did; returns what the store must read back.

    That is upstream's reads, but for the older of two sessions that shared a
    title at the anchor: the newest keeps it (upstream's own repair rule).
    """
    await build_layout(conn, layout)
    await populate(conn, layout)
    sessions, messages = await upstream_reads(conn, layout)
    if layout == "anchor":
        sessions["s-dup-old"].update(title=None, title_source=None)
    return sessions, messages


async def assert_open_fails_untouched(
    conn: Any, pg_dsn: str, match: str, *, refusal: bool = False, attempts: int = 1
) -> None:
    """Opening fails with ``match`` (writable; a refusal read-only as well) and changes no catalog row or data."""
    catalog, data = await catalog_snapshot(conn), await data_snapshot(conn)
    for read_only in (False, True) if refusal else (False,) * attempts:
        db = SessionDB(pg_dsn, read_only=read_only)
        with pytest.raises(RuntimeError if refusal else Exception, match=match) as failed:
            await db.get_session("s-main")
        await db.close()
        assert not refusal or read_only or "changing nothing" in str(failed.value)
        assert await catalog_snapshot(conn) == catalog and await data_snapshot(conn) == data


_MESSAGE_KEYS = (
    "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp", "token_count",
    "finish_reason", "reasoning", "platform_message_id", "observed", "active", "compacted", "display_metadata",
)


async def assert_reads_back(db: SessionDB, sessions: dict[str, Any], messages: dict[int, Any]) -> None:
    for sid, expected in sessions.items():
        ours = await db.get_session(sid)
        assert ours is not None, sid
        assert "payload" not in ours and "last_active" not in ours
        shared = (set(ours) & set(expected)) - {"conversation_id", "hidden"}
        assert len(shared) >= 50, sorted(shared)
        diff = {k: (ours[k], expected[k]) for k in shared if not same(ours[k], expected[k])}
        assert diff == {}, sid
        rows = await db.get_messages(sid, include_inactive=True)
        assert [m["id"] for m in rows] == sorted(i for i, m in messages.items() if m["session_id"] == sid)
        for row in rows:
            want = messages[row["id"]]
            diff = {k: (row[k], want.get(k)) for k in _MESSAGE_KEYS if not same(row[k], want.get(k))}
            assert diff == {}, row["id"]
            if want.get("reasoning_details") is not None:
                assert json.loads(row["reasoning_details"]) == want["reasoning_details"]


@pytest.mark.parametrize("layout", list(LAYOUTS))
async def test_upstream_layout_migrates_in_place(pg_dsn: str, layout: str) -> None:
    conn = await schema_connect(pg_dsn)
    try:
        sessions, messages = await upstream_schema(conn, layout)
        assert sessions["s-main"]["model"] == "gpt-x" and isinstance(messages[3]["content"], dict)

        async with SessionDB(pg_dsn) as db:
            facts = db._backend._facts  # type: ignore[attr-defined]
            assert facts["reconciled"] is True and facts["migrated_from"].startswith("async-hermes-agent")
            if any("session_turn_leases" in s for s in LAYOUTS[layout][1]):
                leases = await conn.fetch("SELECT conversation_id, holder, token, holder_host FROM session_turn_leases")
                assert [tuple(r) for r in leases] == [("s-main", "pid=1:worker=a", leases[0]["token"], None)]
                assert leases[0]["token"] > 0  # the expired lease is gone, the live one kept with a token
            await assert_reads_back(db, sessions, messages)
            assert (await db.get_messages_as_conversation("s-main"))[2]["content"] == {"answer": "structured"}
            assert await db.get_session_title("s-main") == "Main work"
            assert (await db.resolve_session_by_title("Main work")) == "s-main"
            hits = await db.search_messages("structured")
            assert {h["session_id"] for h in hits} == {"s-main"}
            assert [h["session_id"] for h in await db.search_messages("SUMMARY")] == ["s-compact"]
            assert (await db.get_session("s-tip") or {})["conversation_id"] == "s-root"
            if any("session_turn_leases" in s for s in LAYOUTS[layout][1]):
                await leases_carry_over(db)
            await writes_work(db, conn)

        meta = dict(await conn.fetch("SELECT key, value FROM state_meta"))
        assert meta[LAYOUT_KEY] == str(LAYOUT) and UPSTREAM_KEY not in meta
        assert meta[ORIGIN_KEY].startswith("async-hermes-agent")
        assert [r[0] for r in await conn.fetch("SELECT version FROM schema_version")] == [SCHEMA_VERSION]
        types = dict(await conn.fetch(
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema()"))
        assert types["sessions.id"] == types["messages.role"] == types["session_model_usage.task"] == "text"
        assert types["messages.token_count"] == "bigint"
        assert not {"sessions.payload", "messages.payload", "sessions.last_active", "session_model_usage.id"} & set(types)
        if any("async_delegations" in s for s in LAYOUTS[layout][1]):  # kept, with upstream's own columns
            assert types["async_delegations.owner_instance_id"] == "text"
            assert types["async_delegations.owner_pid"] == types["async_delegations.delivery_attempts"] == "bigint"
            assert await conn.fetchval("SELECT owner_instance_id FROM async_delegations") == "7:abc"
        await assert_opens_without_ddl(pg_dsn)
    finally:
        await conn.close()


async def leases_carry_over(db: SessionDB) -> None:
    """Upstream's live lease still holds, fences and releases under its holder; the expired one is gone."""
    holder = "pid=1:worker=a"
    assert not await db.try_acquire_session_turn_lease("s-main", "intruder", ttl_seconds=60)
    with pytest.raises(SessionTurnLeaseLostError):
        await db.append_message("s-main", "user", "stale", turn_lease_holder="intruder")
    await db.append_message("s-main", "user", "fenced", turn_lease_holder=holder)
    assert await db.refresh_session_turn_lease("s-main", holder, ttl_seconds=60)
    await db.release_session_turn_lease("s-main", holder)
    assert await db.try_acquire_session_turn_lease("s-main", "intruder", ttl_seconds=60)
    await db.release_session_turn_lease("s-main", "intruder")
    assert await db.try_acquire_session_turn_lease("s-compact", "worker-c", ttl_seconds=60)
    await db.release_session_turn_lease("s-compact", "worker-c")


async def writes_work(db: SessionDB, conn: Any) -> None:
    """Appends, compaction, usage upserts and title uniqueness on the migrated rows."""
    new_id = await db.append_message("s-main", "user", {"fresh": [1, 2]})
    assert (await db.get_messages("s-main"))[-1]["content"] == {"fresh": [1, 2]}
    assert (await db.get_messages("s-main"))[-1]["id"] == new_id
    before = (await db.get_session("s-main") or {})["message_count"]
    await db.append_messages_batch("s-main", [{"role": "assistant", "content": "batch reply"}])
    assert (await db.get_session("s-main") or {})["message_count"] == before + 1
    await db.archive_and_compact("s-compact", [{"role": "user", "content": "second summary"}])
    assert [m["content"] for m in await db.get_messages("s-compact")] == ["second summary"]
    await db.update_token_counts("s-main", input_tokens=7, model="gpt-x", estimated_cost_usd=0.25)
    usage = {
        (r["model"], r["billing_provider"], r["task"]): (r["api_call_count"], r["input_tokens"], r["estimated_cost_usd"])
        for r in await conn.fetch("SELECT * FROM session_model_usage WHERE session_id = 's-main'")
    }
    # The upstream row of (gpt-x, '', '') took the new usage in (an upsert on the composite key).
    assert usage[("gpt-x", "", "")] == (2, 22, 1.0) and usage[("unknown", "openai", "title")] == (1, 3, 0.0)
    await db.record_auxiliary_usage("s-main", "title", model="unknown", billing_provider="openai", input_tokens=1)
    assert await conn.fetchval(
        "SELECT api_call_count FROM session_model_usage WHERE session_id = 's-main' AND task = 'title'") == 2
    with pytest.raises(ValueError, match="already in use"):
        await db.set_session_title("s-compact", "Main work")
    assert await db.set_session_title("s-compact", "Compacted")
    await db.create_session("s-new", "cli", model="m", system_prompt="be brief")
    assert (await db.get_session("s-new") or {})["system_prompt"] == "be brief"
    await db.delete_session("s-compact")
    assert await conn.fetchval("SELECT count(*) FROM messages WHERE session_id = 's-compact'") == 0


async def assert_opens_without_ddl(pg_dsn: str) -> None:
    """A store opens while another transaction holds what live writers hold, and changes no catalog row.

    DDL (ALTER, CREATE INDEX, CREATE TRIGGER) would queue behind that lock and time the open out;
    a replaced function would change its pg_proc row.
    """
    conn = await schema_connect(pg_dsn)
    try:
        before = await catalog_snapshot(conn)
        present = [t for t in TABLES if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", t)]
        async with conn.transaction():
            await conn.execute(f"LOCK TABLE {', '.join(present)} IN ROW EXCLUSIVE MODE")
            db = SessionDB(pg_dsn)
            try:
                await asyncio.wait_for(db.get_session("s-main"), timeout=20)
                assert db._backend._facts["reconciled"] is False  # type: ignore[attr-defined]
            finally:
                await db.close()
        assert await catalog_snapshot(conn) == before
    finally:
        await conn.close()


# ------------------------------------------------------------------ earlier hermes-state layouts

_SEARCH_EXPRESSION = (
    "to_tsvector('simple', coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))"
)
# What each earlier release lacked, newest first; a layout is the current one minus every step up to it.
_BEFORE_LEASES = (  # 3276cee: before hidden sessions, conversation ids and turn leases (0dbf84b)
    "DROP TRIGGER sessions_conversation_on_insert ON sessions",
    "DROP TRIGGER sessions_conversation_on_update ON sessions",
    "DROP FUNCTION hermes_conversation_on_insert()",
    "DROP FUNCTION hermes_conversation_on_update()",
    "ALTER TABLE sessions DROP COLUMN hidden, DROP COLUMN conversation_id",
    "DROP TABLE session_turn_leases",
    "DROP SEQUENCE session_turn_lease_tokens",
    "DELETE FROM state_meta WHERE key LIKE 'hermes_state_postgres_%'",
)
_BEFORE_HOLDER_HOST = ("ALTER TABLE compression_locks DROP COLUMN holder_host",)  # 52fe0f8
_BEFORE_SEARCH_COLUMN = (  # 0e32a37: the GIN index on the expression, no stored column
    "DROP INDEX messages_hermes_search_idx",
    "DROP INDEX IF EXISTS messages_hermes_trgm_idx",
    "DROP INDEX messages_hermes_time_idx",
    "DROP INDEX messages_hermes_cjk_idx",
    "ALTER TABLE messages DROP COLUMN search_vector",
    f"CREATE INDEX messages_hermes_search_idx ON messages USING GIN (({_SEARCH_EXPRESSION}))",
)
_INTEGER_COUNTERS = (  # c4f1998 and ac13e71 declared these INTEGER
    "ALTER TABLE sessions ALTER compression_fallback_streak TYPE integer, "
    "ALTER compression_ineffective_count TYPE integer, ALTER rewind_count TYPE integer",
)
_BEFORE_WRITE_BATCHES = ("DROP TABLE write_batches",)  # c4f1998
_BEFORE_MARKER_FUNCTION = ("DROP FUNCTION hermes_config_marker(text, text)",)  # 2bc0137, the first release

OURS = {
    "3276cee": _BEFORE_LEASES,
    "52fe0f8": (*_BEFORE_LEASES, *_BEFORE_HOLDER_HOST),
    "0e32a37": (*_BEFORE_LEASES, *_BEFORE_HOLDER_HOST, *_BEFORE_SEARCH_COLUMN),
    "ac13e71": (*_BEFORE_LEASES, *_BEFORE_HOLDER_HOST, *_BEFORE_SEARCH_COLUMN, *_INTEGER_COUNTERS),
    "c4f1998": (*_BEFORE_LEASES, *_BEFORE_HOLDER_HOST, *_BEFORE_SEARCH_COLUMN, *_INTEGER_COUNTERS,
                *_BEFORE_WRITE_BATCHES),
    "2bc0137": (*_BEFORE_LEASES, *_BEFORE_HOLDER_HOST, *_BEFORE_SEARCH_COLUMN, *_INTEGER_COUNTERS,
                *_BEFORE_WRITE_BATCHES, *_BEFORE_MARKER_FUNCTION),
}


async def fill_ours(db: SessionDB) -> None:
    await db.create_session("a", "cli", model="m", system_prompt="be brief", model_config={"t": 0})
    await db.append_message("a", "user", "hello")
    await db.append_message("a", "assistant", {"structured": [1, "x"]}, tool_calls=[{"id": "c1"}])
    await db.append_message("a", "user", "nul \x00 inside")
    await db.set_session_title("a", "First")
    await db.update_token_counts("a", input_tokens=4, model="m", estimated_cost_usd=0.5)
    await db.create_session("b", "cli")
    await db.append_messages_batch("b", [{"role": "user", "content": f"turn {i}"} for i in range(5)])
    await db.archive_and_compact("b", [{"role": "user", "content": "summary"}])
    await db.end_session("a", "compression")
    await db.create_session("a2", "cli", parent_session_id="a")
    await db.append_message("a2", "user", "continued")


async def reads_of(db: SessionDB) -> dict[str, Any]:
    return {
        sid: (await db.get_session(sid), await db.get_messages(sid, include_inactive=True))
        for sid in ("a", "b", "a2")
    }


@pytest.mark.parametrize("release", list(OURS))
async def test_earlier_hermes_state_layout_migrates_in_place(pg_dsn: str, release: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await fill_ours(db)
        before = await reads_of(db)
    conn = await schema_connect(pg_dsn)
    try:
        async with conn.transaction():
            for statement in OURS[release]:
                await conn.execute(statement)
        async with SessionDB(pg_dsn) as db:
            facts = db._backend._facts  # type: ignore[attr-defined]
            assert facts["reconciled"] is True and facts["migrated_from"] == "hermes-state (unmarked layout)"
            after = await reads_of(db)
            assert after == before
            assert [h["session_id"] for h in await db.search_messages("summary")] == ["b"]
            await db.append_message("a2", "user", {"after": True})
            assert (await db.get_messages("a2"))[-1]["content"] == {"after": True}
        assert await conn.fetchval(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'sessions' AND column_name = 'rewind_count'") == "bigint"
        assert await conn.fetchval("SELECT value FROM state_meta WHERE key = $1", LAYOUT_KEY) == str(LAYOUT)
        await assert_opens_without_ddl(pg_dsn)
    finally:
        await conn.close()


async def test_empty_schema_is_created_and_marked(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        assert db._backend._facts["migrated_from"] == "empty"  # type: ignore[attr-defined]
        await db.create_session("s-main", "cli")
    conn = await schema_connect(pg_dsn)
    try:
        meta = dict(await conn.fetch("SELECT key, value FROM state_meta"))
        assert meta[LAYOUT_KEY] == str(LAYOUT) and meta[ORIGIN_KEY] == "empty"
        assert set(json.loads(meta["hermes_state_postgres_definitions"])) >= {"hermes_config_marker", "idx_sessions_source"}
    finally:
        await conn.close()
    await assert_opens_without_ddl(pg_dsn)


# ------------------------------------------------------------------ atomicity


async def test_a_failure_late_in_the_migration_leaves_nothing_and_a_retry_succeeds(pg_dsn: str) -> None:
    """A row the foreign key added near the end rejects fails the migration after data and columns changed."""
    conn = await schema_connect(pg_dsn)
    try:
        sessions, messages = await upstream_schema(conn, "anchor")
        await conn.execute("ALTER TABLE messages DROP CONSTRAINT fk_messages_session_id")
        await conn.execute(
            "INSERT INTO messages (session_id, payload, role, content, timestamp, observed, active, compacted) "
            """VALUES ('ghost', '{"content": [1]}', 'user', '[1]', 1, 0, 1, 0)"""
        )
        await assert_open_fails_untouched(conn, pg_dsn, "fk_messages_session_id")
        await conn.execute("DELETE FROM messages WHERE session_id = 'ghost'")
        async with SessionDB(pg_dsn) as db:
            await assert_reads_back(db, sessions, messages)
    finally:
        await conn.close()


async def test_a_failure_at_commit_leaves_nothing_and_a_retry_succeeds(pg_dsn: str) -> None:
    """A deferred trigger makes the COMMIT itself fail, after every step (markers included) ran."""
    conn = await schema_connect(pg_dsn)
    try:
        sessions, messages = await upstream_schema(conn, "storage-5")
        await conn.execute(
            "CREATE FUNCTION refuse_marker() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.key = '{LAYOUT_KEY}' THEN RAISE EXCEPTION 'injected failure at commit'; END IF; "
            "RETURN NULL; END $$"
        )
        await conn.execute(
            "CREATE CONSTRAINT TRIGGER refuse_marker AFTER INSERT OR UPDATE ON state_meta "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_marker()"
        )
        # twice: the second attempt finds nothing half-done by the first
        await assert_open_fails_untouched(conn, pg_dsn, "injected failure at commit", attempts=2)
        await conn.execute("DROP TRIGGER refuse_marker ON state_meta")
        async with SessionDB(pg_dsn) as db:
            await assert_reads_back(db, sessions, messages)
    finally:
        await conn.close()


_OPENER = textwrap.dedent("""
    import asyncio, json, sys
    from hermes_state.postgres import SessionDB

    async def main():
        async with SessionDB(sys.argv[1]) as db:
            session = await db.get_session("s-main")
            facts = db._backend._facts
            print(json.dumps({"reconciled": facts["reconciled"], "model": session["model"],
                              "content": (await db.get_messages("s-main"))[2]["content"]}))

    asyncio.run(main())
""")


async def test_two_processes_opening_at_once_migrate_once(pg_admin_dsn: str, tmp_path: Path) -> None:
    """Both wait on the migration lock (held here until both queue), then one migrates and one finds it current."""
    import asyncpg

    from hermes_state.postgres.schema import MIGRATION_LOCK_KEY

    from .postgres_support import store_dsn, temporary_database

    async for url in temporary_database(pg_admin_dsn):  # the advisory lock spans a database: hold it in our own
        conn = await asyncpg.connect(url)
        try:
            await build_layout(conn, "storage-5")
            await populate(conn, "storage-5")
            await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
            procs = [
                subprocess.Popen([sys.executable, "-c", _OPENER, store_dsn(url)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
                for _ in range(2)
            ]
            try:
                deadline = time.monotonic() + 180  # interpreter start and imports, on a loaded machine
                waiting = 0
                while waiting < 2 and time.monotonic() < deadline:
                    exited = [p for p in procs if p.poll() is not None]
                    assert not exited, exited[0].communicate()
                    await asyncio.sleep(0.05)
                    waiting = await conn.fetchval(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
                assert waiting == 2
                await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
                outputs = [await asyncio.to_thread(p.communicate, timeout=120) for p in procs]
            finally:
                for p in procs:
                    p.kill() if p.poll() is None else None
            results = []
            for (out, err), proc in zip(outputs, procs):
                assert proc.returncode == 0, err
                results.append(json.loads(out.strip().splitlines()[-1]))
            assert sorted(r["reconciled"] for r in results) == [False, True]
            assert all(r["model"] == "gpt-x" and r["content"] == {"answer": "structured"} for r in results)
            assert await conn.fetchval("SELECT value FROM state_meta WHERE key = $1", LAYOUT_KEY) == str(LAYOUT)
        finally:
            await conn.close()


# ------------------------------------------------------------------ shapes refused, nothing changed

# name -> (base: "ours" (the current layout, marked) or an upstream layout, statements, message)
REFUSED: dict[str, tuple[str, tuple[str, ...], str]] = {
    "unknown upstream storage version": (
        "storage-5", ("UPDATE state_meta SET value = 'v5' WHERE key = 'postgres_storage_version'",),
        "postgres_storage_version holds 'v5': an async-hermes-agent storage version unknown"),
    "newer upstream storage version": (
        "storage-5", ("UPDATE state_meta SET value = '6' WHERE key = 'postgres_storage_version'",),
        "storage version newer than this backend knows"),
    "newer layout of ours": (
        "ours", (f"UPDATE state_meta SET value = '{LAYOUT + 1}' WHERE key = '{LAYOUT_KEY}'",),
        "a newer hermes-state layout"),
    "unknown layout marker of ours": (
        "ours", (f"UPDATE state_meta SET value = 'one' WHERE key = '{LAYOUT_KEY}'",), "not a layout this release knows"),
    "newer schema_version": ("ours", (f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}",), "newer"),
    "older schema_version": (
        "anchor", (f"UPDATE schema_version SET version = {SCHEMA_VERSION - 1}",),
        f"logical schema version {SCHEMA_VERSION - 1} is unsupported"),
    "schema_version rows that disagree": (
        "ours", (f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION - 1})",), "rows that disagree"),
    "empty schema_version": ("ours", ("DELETE FROM schema_version",), "holds no row|requires a schema version row"),
    "store tables without schema_version": ("anchor", ("DROP TABLE schema_version",), "refusing to guess"),
    "incompatible column type": (
        "ours", ("ALTER TABLE sessions ALTER started_at TYPE timestamptz USING to_timestamp(started_at)",),
        "column sessions.started_at is timestamp with time zone; this release needs double precision"),
    "incompatible column type in upstream's table": (
        "storage-2", ("DROP INDEX messages_hermes_search_idx",
                      "ALTER TABLE messages ALTER content TYPE bytea USING convert_to(content, 'UTF8')"),
        "column messages.content is bytea"),
    "narrowing conversion": ("ours", ("ALTER TABLE messages ALTER token_count TYPE text",), "messages.token_count is text"),
    "a column no insert of ours fills": (
        "ours", ("ALTER TABLE sessions ADD COLUMN tenant TEXT", "UPDATE sessions SET tenant = 'x'",
                 "ALTER TABLE sessions ALTER tenant SET NOT NULL"),
        "sessions.tenant is not this release's and is NOT NULL without a default"),
    "a primary key of another shape": (
        "ours", ("ALTER TABLE state_meta DROP CONSTRAINT state_meta_pkey",), "table state_meta has primary key none"),
    "upstream snapshots beside our columns": (
        "anchor", ("ALTER TABLE messages ADD COLUMN content_kind SMALLINT NOT NULL DEFAULT 0",), "mixes"),
    "upstream snapshots back in a migrated database": (
        "ours", ("ALTER TABLE sessions ADD COLUMN payload TEXT",), "reappeared in a database hermes-state migrated"),
    "a partial upstream layout": ("anchor", ("ALTER TABLE sessions DROP COLUMN payload",), "sessions lacks upstream's payload"),
    "both markers": (
        "ours", ("INSERT INTO state_meta VALUES ('postgres_storage_version', '5')",), "holds both"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_shape_it_does_not_know_is_refused_and_left_alone(pg_dsn: str, case: str) -> None:
    base, statements, message = REFUSED[case]
    if base == "ours":
        async with SessionDB(pg_dsn) as db:
            await db.create_session("s-main", "cli")
            await db.append_message("s-main", "user", {"x": 1})
    conn = await schema_connect(pg_dsn)
    try:
        if base != "ours":
            await build_layout(conn, base)
            await populate(conn, base)
        for statement in statements:
            await conn.execute(statement)
        await assert_open_fails_untouched(conn, pg_dsn, message, refusal=True)
    finally:
        await conn.close()


# ------------------------------------------------------------------ read-only stores


@pytest.mark.parametrize("layout", ["storage-5", "unmarked hermes-state"])
async def test_a_read_only_store_never_migrates(pg_dsn: str, layout: str) -> None:
    conn = await schema_connect(pg_dsn)
    try:
        if layout == "unmarked hermes-state":
            async with SessionDB(pg_dsn) as db:
                await db.create_session("s-main", "cli")
            for statement in OURS["3276cee"]:
                await conn.execute(statement)
        else:
            await build_layout(conn, layout)
            await populate(conn, layout)
        catalog, data = await catalog_snapshot(conn), await data_snapshot(conn)
        db = SessionDB(pg_dsn, read_only=True)
        with pytest.raises(RuntimeError, match="requires the current schema; writable migration is required") as refused:
            await db.get_session("s-main")
        await db.close()
        assert LAYOUT_KEY in str(refused.value)
        assert await catalog_snapshot(conn) == catalog and await data_snapshot(conn) == data
        async with SessionDB(pg_dsn):  # a writable open migrates; then the reader opens
            pass
        async with SessionDB(pg_dsn, read_only=True) as reader:
            assert (await reader.get_session("s-main") or {})["source"] == "cli"
    finally:
        await conn.close()


# ------------------------------------------------------------------ definitions that change


async def test_a_changed_function_trigger_or_index_definition_is_replaced_once(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_state.postgres import layout, schema

    async with SessionDB(pg_dsn) as db:
        await db.create_session("s-main", "cli")
    marker = schema.FUNCTIONS["hermes_config_marker"].replace("RETURN NULL; END IF;", "RETURN NULL; END IF; -- v2\n")
    trigger = schema.TRIGGERS["sessions_conversation_on_insert"].replace("BEFORE INSERT ON", "BEFORE INSERT  ON")
    monkeypatch.setitem(schema.FUNCTIONS, "hermes_config_marker", marker)
    monkeypatch.setitem(schema.TRIGGERS, "sessions_conversation_on_insert", trigger)
    monkeypatch.setitem(schema.INDEXES, "idx_sessions_source", "sessions (source, started_at)")
    layout.definition_hashes.cache_clear()
    try:
        conn = await schema_connect(pg_dsn)
        try:
            old_trigger = await conn.fetchval("SELECT oid FROM pg_trigger WHERE tgname = 'sessions_conversation_on_insert' "
                                              "AND tgrelid = 'sessions'::regclass")
            async with SessionDB(pg_dsn) as db:
                assert db._backend._facts["reconciled"] is True  # type: ignore[attr-defined]
                assert "definition(s) changed" not in " ".join(await db.integrity_problems())
                await db.create_session("s-2", "cli")  # the recreated trigger still fills the conversation id
                assert (await db.get_session("s-2") or {})["conversation_id"] == "s-2"
            assert "-- v2" in await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = 'hermes_config_marker' "
                                                 "AND pronamespace = current_schema()::regnamespace")
            assert await conn.fetchval("SELECT oid FROM pg_trigger WHERE tgname = 'sessions_conversation_on_insert' "
                                       "AND tgrelid = 'sessions'::regclass") != old_trigger
            assert "started_at" in await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = "
                                                       "'idx_sessions_source' AND schemaname = current_schema()")
        finally:
            await conn.close()
        await assert_opens_without_ddl(pg_dsn)
    finally:
        monkeypatch.undo()
        layout.definition_hashes.cache_clear()


# ------------------------------------------------------------------ doctor


async def test_doctor_names_layout_problems(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s-main", "cli")
        conn = await schema_connect(pg_dsn)
        try:
            await conn.execute("ALTER TABLE sessions ALTER rewind_count TYPE integer")
            await conn.execute(f"DELETE FROM state_meta WHERE key = '{LAYOUT_KEY}'")
            await conn.execute("UPDATE state_meta SET value = '{}' WHERE key = 'hermes_state_postgres_definitions'")
            problems = await db.integrity_problems()
            assert "table sessions needs column changes: rewind_count integer -> bigint" in problems
            assert f"state_meta lacks {LAYOUT_KEY} = {LAYOUT} (found None)" in problems
            assert any(p.startswith("definition(s) changed since created: ") and "hermes_config_marker" in p
                       for p in problems)
            await conn.execute("ALTER TABLE sessions ALTER started_at TYPE timestamptz USING to_timestamp(started_at)")
            assert any(p.startswith("column sessions.started_at is timestamp with time zone")
                       for p in await db.integrity_problems())
        finally:
            await conn.close()
