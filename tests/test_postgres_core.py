"""PostgreSQL storage facts the backend-neutral tests cannot see: schema, locking, read-only, batches."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionNotFoundError
from hermes_state.commands import AppendMessages, SetMeta
from hermes_state.encoding import encode_message_dicts
from hermes_state.postgres import PoolTimeoutError, SessionDB
from hermes_state.postgres.schema import (
    FOREIGN_KEYS,
    INDEXES,
    SCHEMA_VERSION,
    SEARCH_COLUMN,
    SEARCH_DOCUMENT,
    TABLES,
)

from .postgres_support import admin_connect

pytestmark = pytest.mark.backends("postgres")


async def _admin(pg_dsn: str) -> Any:
    """A raw connection with the test schema on its search_path."""
    schema = pg_dsn.rsplit("search_path=", 1)[1]
    base = "postgresql://" + pg_dsn[len("postgresql+asyncpg://"):].split("?", 1)[0]
    conn = await admin_connect(base)
    await conn.execute(f'SET search_path TO "{schema}"')
    return conn


async def test_first_use_creates_the_schema_with_its_names(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        info = await db.storage_info()
    assert info["backend"] == "postgres" and info["schema_version"] == SCHEMA_VERSION
    conn = await _admin(pg_dsn)
    try:
        tables = {r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        assert tables == set(TABLES)
        indexes = {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
        assert set(INDEXES) | {"idx_sessions_title_unique"} <= indexes
        fks = {r[0] for r in await conn.fetch(
            "SELECT conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
            "WHERE contype = 'f' AND n.nspname = current_schema()")}
        assert fks == set(FOREIGN_KEYS)
        assert [r[0] for r in await conn.fetch("SELECT version FROM schema_version")] == [SCHEMA_VERSION]
        types = dict(await conn.fetch(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'sessions'"))
        assert types["id"] == "text" and types["parent_session_id"] == "text"
        search_def = await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_hermes_search_idx' AND schemaname = current_schema()")
        assert "gin" in search_def and SEARCH_COLUMN in search_def
        generated = await conn.fetchval(
            "SELECT generation_expression FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'messages' AND column_name = $1", SEARCH_COLUMN)
        assert "tool_calls" in generated and "tool_name" in generated and "content" in generated
    finally:
        await conn.close()


async def test_search_index_serves_the_stored_vector(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        await db.append_message("s", "tool", "a needle here", tool_name="grep", tool_calls=[{"id": "x"}])
    conn = await _admin(pg_dsn)
    try:
        # The stored vector is exactly the document expression, filled by PostgreSQL on insert.
        assert await conn.fetchval(f"SELECT {SEARCH_COLUMN} = {SEARCH_DOCUMENT} FROM messages")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(
            f"EXPLAIN SELECT id FROM messages WHERE {SEARCH_COLUMN} @@ to_tsquery('simple', 'needle')"))
        assert "messages_hermes_search_idx" in plan
    finally:
        await conn.close()


async def test_missing_objects_are_restored_and_current_schema_runs_no_ddl(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
    conn = await _admin(pg_dsn)
    try:
        await conn.execute("DROP INDEX idx_sessions_parent")
        await conn.execute("ALTER TABLE messages DROP CONSTRAINT fk_messages_session_id")
        await conn.execute("ALTER TABLE sessions DROP COLUMN pinned")
        async with SessionDB(pg_dsn) as db:
            assert (await db.get_session("s") or {})["pinned"] == 0
            facts = db._backend._facts  # type: ignore[attr-defined]
            assert facts["reconciled"] is True
        assert await conn.fetchval("SELECT to_regclass('idx_sessions_parent') IS NOT NULL")
        # pg_constraint spans every schema; other tests' schemas hold the same name.
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_constraint WHERE conname = 'fk_messages_session_id'"
                " AND connamespace = current_schema()::regnamespace"
            )
            == 1
        )
        async with SessionDB(pg_dsn) as db:
            await db.get_session("s")
            assert db._backend._facts["reconciled"] is False  # type: ignore[attr-defined]
    finally:
        await conn.close()


async def test_newer_schema_is_refused_and_left_alone(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
    conn = await _admin(pg_dsn)
    try:
        await conn.execute("UPDATE schema_version SET version = $1", SCHEMA_VERSION + 1)
        await conn.execute("DROP INDEX idx_sessions_source")
        for read_only in (False, True):
            db = SessionDB(pg_dsn, read_only=read_only)
            with pytest.raises(RuntimeError, match="newer"):
                await db.get_session("s")
            await db.close()
        assert await conn.fetchval("SELECT to_regclass('idx_sessions_source') IS NULL")
    finally:
        await conn.close()


async def test_unversioned_schema_with_rows_is_refused(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
    conn = await _admin(pg_dsn)
    try:
        await conn.execute("DROP TABLE schema_version")
        db = SessionDB(pg_dsn)
        with pytest.raises(RuntimeError, match="refusing to guess"):
            await db.get_session("s")
        await db.close()
    finally:
        await conn.close()


async def test_read_only_store(pg_dsn: str) -> None:
    empty = SessionDB(pg_dsn, read_only=True)
    with pytest.raises(RuntimeError, match="initialized schema"):
        await empty.get_session("s")
    await empty.close()
    conn = await _admin(pg_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()") == 0
    finally:
        await conn.close()
    async with SessionDB(pg_dsn) as writer, SessionDB(pg_dsn, read_only=True) as reader:
        await writer.create_session("s", "cli")
        await writer.append_message("s", "user", "hello")
        assert (await reader.get_session("s") or {})["source"] == "cli"
        assert [m["content"] for m in await reader.get_messages("s")] == ["hello"]
        with pytest.raises(PermissionError, match="read-only"):
            await reader.append_message("s", "user", "nope")
        pool = reader._backend.pool  # type: ignore[attr-defined]
        async with pool.acquire() as one, pool.acquire() as two:
            for conn in (one, two):
                assert await conn.fetchval("SHOW transaction_read_only") == "on"
            import asyncpg

            with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                await one.execute("INSERT INTO state_meta (key, value) VALUES ('k', 'v')")
        assert pool.checkedout() == 0


async def test_prompts_are_stored_once_and_collected(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("a", "cli", system_prompt="SYS")
        await db.create_session("b", "cli", system_prompt="SYS")
        assert (await db.get_session("a") or {})["system_prompt"] == "SYS"
        conn = await _admin(pg_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM system_prompts") == 1
            assert await conn.fetchval("SELECT count(*) FROM sessions WHERE system_prompt IS NOT NULL") == 0
            await db.update_system_prompt("a", "other prompt ✓")
            await db.update_system_prompt("b", None)
            prompts = dict(await conn.fetch("SELECT hash, prompt FROM system_prompts"))
            assert prompts == {hashlib.sha256("other prompt ✓".encode()).hexdigest(): "other prompt ✓"}
        finally:
            await conn.close()


async def test_structured_content_uses_the_kind_column(pg_dsn: str) -> None:
    parts = {"nested": ["value", 1]}
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        ids = [
            await db.append_message("s", "user", parts),
            await db.append_message("s", "user", "plain"),
            await db.append_message("s", "user", b"\x00\xffraw"),
            await db.append_message("s", "user", 42),
            await db.append_message("s", "user", 2.5),
            await db.append_message("s", "user", "NUL \x00 inside"),
        ]
        rows = await db.get_messages("s")
        assert [r["content"] for r in rows] == [parts, "plain", b"\x00\xffraw", 42, 2.5, "NUL \x00 inside"]
        assert [type(r["content"]) for r in rows[3:5]] == [int, float]
        conn = await _admin(pg_dsn)
        try:
            stored = await conn.fetchrow("SELECT content, content_kind FROM messages WHERE id = $1", ids[0])
            assert json.loads(stored["content"]) == parts and stored["content_kind"] == 1
        finally:
            await conn.close()


async def test_nul_in_a_text_field_fails_that_write_alone(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        good = asyncio.ensure_future(db.append_message("s", "user", "fine"))
        bad = asyncio.ensure_future(db.append_message("s", "user", "x", tool_name="a\x00b"))
        with pytest.raises(ValueError, match="NUL"):
            await bad
        assert await good
        assert [m["content"] for m in await db.get_messages("s")] == ["fine"]


async def test_one_bad_command_fails_alone_with_the_sqlite_error(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        rows = encode_message_dicts([{"role": "user", "content": "x"}])
        commands = [
            AppendMessages(session_id="s", rows=rows),
            AppendMessages(session_id="missing", rows=rows),
            SetMeta(key="k", value="v"),
            AppendMessages(session_id="s", rows=rows, want_id=True),
        ]
        outcomes = await db._backend.apply_batch(commands)  # type: ignore[attr-defined]
        assert [ok for ok, _ in outcomes] == [True, False, True, True]
        error = outcomes[1][1]
        assert type(error) is SessionNotFoundError
        assert str(error) == str(SessionNotFoundError("missing"))
        assert await db.message_count("s") == 2
        assert await db.get_meta("k") == "v"


async def test_concurrent_appends_keep_counts_and_order(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await asyncio.gather(*(db.create_session(f"s{i}", "concurrent") for i in range(8)))
        await asyncio.gather(*(
            db.append_messages_batch(f"s{i}", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], chunk_rows=1)
            for i in range(8)
        ))
        ids = await asyncio.gather(*(db.append_message("s0", "user", f"m{i}") for i in range(40)))
        assert len(set(ids)) == 40
        for i in range(8):
            assert await db.message_count(f"s{i}") == (42 if i == 0 else 2)
            assert (await db.get_session(f"s{i}") or {})["message_count"] == (42 if i == 0 else 2)
        rows = await db.get_messages("s0")
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
        assert db._actor.batches < 40 + 8 + 16  # group commit batched some of them
        assert db._backend.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_paging_after_id(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": str(i)} for i in range(10)])
        first = await db.get_messages("s", limit=4)
        rest = await db.get_messages("s", after_id=first[-1]["id"])
        assert [m["content"] for m in first + rest] == [str(i) for i in range(10)]
        latest = await db.get_messages("s", limit=3, latest=True)
        assert [m["content"] for m in latest] == ["7", "8", "9"]
        assert [m["content"] for m in await db.get_messages("s", limit=2, offset=8)] == ["8", "9"]


async def test_pool_checkout_timeout_names_the_limit(pg_dsn: str, hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text(
        "database:\n  postgres:\n    pool_size: 1\n    max_overflow: 0\n    pool_timeout: 0.2\n"
    )
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        pool = db._backend.pool  # type: ignore[attr-defined]
        async with pool.acquire():
            with pytest.raises(PoolTimeoutError, match="size 1 overflow 0") as caught:
                await db.get_session("s")
            assert isinstance(caught.value, TimeoutError)
        assert await db.get_session("s") is not None
        assert pool.checkedout() == 0


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from hermes_state_postgres import SessionDB

    async def main(dsn, worker, count):
        async with SessionDB(dsn) as db:
            for i in range(count):
                await db.append_message("shared", "user", f"worker={worker};sequence={i}")

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_processes_appending_to_one_session_keep_per_worker_order(pg_dsn: str, tmp_path: Path) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("shared", "cli")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, str(script), pg_dsn, f"w{w}", "20", env=env, stderr=subprocess.PIPE)
        for w in range(4)
    ]
    for proc in procs:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, err.decode()
    async with SessionDB(pg_dsn) as db:
        rows = await db.get_messages("shared")
        assert len(rows) == 80 and (await db.get_session("shared") or {})["message_count"] == 80
        for w in range(4):
            mine = [r["content"] for r in rows if r["content"].startswith(f"worker=w{w};")]
            assert mine == [f"worker=w{w};sequence={i}" for i in range(20)]
