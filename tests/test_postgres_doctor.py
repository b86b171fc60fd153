"""``doctor`` on PostgreSQL: each defect is planted on the real server and must be reported.

The store is built through the API, the defect is made with raw SQL in the
test's own schema (superuser tricks where the store's constraints would stop
it: ``session_replication_role = replica`` skips foreign-key triggers), and
``integrity_problems()`` / ``compression_leases()`` / ``hermes-state doctor``
must name it. A clean store after every kind of legitimate transcript change
must report nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state.postgres import SessionDB

from .cli_support import run_cli
from .postgres_support import schema_connect, store_dsn, temporary_database

pytestmark = pytest.mark.backends("postgres")


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[SessionDB]:
    store = SessionDB(pg_dsn)
    try:
        await store.create_session("s1", "cli", system_prompt="be brief")
        await store.append_messages_batch("s1", [{"role": "user", "content": f"turn {i}"} for i in range(4)])
        await store.create_session("s2", "telegram", parent_session_id="s1")
        await store.append_message("s2", "user", "hello")
        await store.update_token_counts("s1", input_tokens=3, model="m")  # a usage ledger row
        yield store
    finally:
        await store.close()


async def raw(pg_dsn: str, *statements: str) -> None:
    """Run ``statements`` in order on one superuser connection in the test's schema."""
    conn = await schema_connect(pg_dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def doctor(home: Path, pg_dsn: str, *options: str) -> tuple[int, dict[str, Any]]:
    """``hermes-state doctor --json`` in a subprocess: (exit code, report)."""
    done = run_cli(home, "--db", pg_dsn, "doctor", "--json", *options)
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def check(report: dict[str, Any], name: str) -> dict[str, str]:
    return next(c for c in report["checks"] if c["check"] == name)


# ------------------------------------------------------------------ clean stores


async def test_a_clean_store_reports_nothing(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    assert await db.integrity_problems() == []
    code, report = doctor(tmp_path, pg_dsn)
    assert code == 0 and report["ok"] is True, report
    assert [c["check"] for c in report["checks"]] == ["schema", "integrity", "fts", "leases"]
    conn = await schema_connect(pg_dsn)
    try:
        amcheck = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'amcheck')")
    finally:
        await conn.close()
    note = "pages verified by amcheck" if amcheck else "amcheck not installed: pages not verified"
    assert check(report, "integrity") == {"check": "integrity", "status": "ok", "detail": f"no problems found ({note})"}
    assert check(report, "fts")["status"] == "ok" and "pg_trgm" in check(report, "fts")["detail"]
    assert check(report, "leases")["detail"] == "0 live, 0 expired"


async def test_every_legitimate_transcript_change_keeps_the_counters_consistent(db: SessionDB) -> None:
    """Rewind, restore, compaction, archiving replace, pop, clear, child publication, import: no false alarm."""
    ids = [m["id"] for m in await db.get_messages("s1")]
    await db.rewind_to_message("s1", ids[2])
    assert await db.integrity_problems() == []
    await db.append_message("s1", "user", "after the rewind")
    await db.restore_rewound("s1", ids[2])
    assert await db.integrity_problems() == []
    await db.create_session("c", "cli")
    await db.append_messages_batch("c", [{"role": "user", "content": f"old {i}"} for i in range(5)])
    await db.archive_and_compact("c", [{"role": "user", "content": "summary"}])
    await db.restore_rewound("c", 0)  # compacted rows become active again, still counted out
    await db.replace_messages("s2", [{"role": "user", "content": "replaced"}])
    await db.pop_message("s2")
    await db.create_session("e", "cli")
    await db.append_message("e", "user", "x")
    await db.clear_messages("e")
    assert await db.try_acquire_compression_lock("s1", "compressor")
    await db.publish_compression_child(
        parent_session_id="s1", child_session_id="s1-next", source="cli",
        messages=[{"role": "user", "content": "handoff"}], compression_lock_holder="compressor",
    )
    await db.release_compression_lock("s1", "compressor")
    exported = await db.export_session("s1")
    assert exported is not None
    await db.delete_session("s1-next")
    await db.import_sessions([{**exported, "id": "s1-copy", "title": None}])
    assert await db.integrity_problems() == []


# ------------------------------------------------------------------ schema objects


async def test_missing_index_foreign_key_and_function_are_named(db: SessionDB, pg_dsn: str) -> None:
    await raw(
        pg_dsn,
        "DROP INDEX idx_sessions_source",
        "ALTER TABLE messages DROP CONSTRAINT fk_messages_session_id",
        "DROP FUNCTION hermes_config_marker(text, text)",
    )
    problems = await db.integrity_problems()
    assert "missing index(es): idx_sessions_source" in problems
    assert "missing foreign key(s): fk_messages_session_id" in problems
    assert "missing function(s): hermes_config_marker" in problems


async def test_missing_column_is_named_and_row_checks_wait_for_it(db: SessionDB, pg_dsn: str) -> None:
    await raw(pg_dsn, "ALTER TABLE sessions DROP COLUMN pinned", "UPDATE sessions SET message_count = 99")
    problems = await db.integrity_problems()
    assert "table sessions lacks column(s): pinned" in problems
    assert not any("message_count" in p for p in problems)  # not judged on a table of the wrong shape


async def test_wrong_schema_version_rows(db: SessionDB, pg_dsn: str) -> None:
    await raw(pg_dsn, "INSERT INTO schema_version VALUES (24)")
    assert (
        "schema_version holds [24, 25] (this release writes [25]): rows that disagree; refusing to guess which one holds"
        in await db.integrity_problems()
    )
    await raw(pg_dsn, "DELETE FROM schema_version")
    assert (
        "schema_version holds no row (this release writes [25]); refusing to guess the schema's version"
        in await db.integrity_problems()
    )


async def test_invalid_search_index_fails_integrity_and_fts(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    # What a failed CREATE INDEX CONCURRENTLY or an interrupted REINDEX leaves behind.
    await raw(pg_dsn, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'messages_hermes_search_idx'::regclass")
    problems = await db.integrity_problems()
    assert any(p.startswith("index messages_hermes_search_idx on messages is invalid") for p in problems), problems
    assert (await db.storage_info())["fts"] == "invalid"
    code, report = doctor(tmp_path, pg_dsn)
    assert code == 1 and report["ok"] is False
    assert check(report, "fts") == {
        "check": "fts", "status": "fail",
        "detail": "the search index is invalid (an interrupted build): doctor --repair rebuilds it",
    }
    assert check(report, "integrity")["status"] == "fail"
    assert "messages_hermes_search_idx" in check(report, "integrity")["detail"]
    code, report = doctor(tmp_path, pg_dsn, "--repair")
    assert code == 0 and report["repair"] == {
        "ok": True, "backup": None, "integrity": "ok",
        "steps": ["rebuilt invalid index messages_hermes_search_idx on messages"],
    }
    assert (await db.storage_info())["fts"] == "tsvector"
    assert [h["session_id"] for h in await db.search_messages("hello")] == ["s2"]  # the rebuilt index serves search


async def test_dropped_search_index_warns(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    await raw(pg_dsn, "DROP INDEX messages_hermes_search_idx")
    assert "missing index(es): messages_hermes_search_idx" in await db.integrity_problems()
    code, report = doctor(tmp_path, pg_dsn)
    assert code == 1
    assert check(report, "fts") == {
        "check": "fts", "status": "warn", "detail": "no full-text index: search uses slower scans",
    }


async def test_pg_trgm_status_follows_the_catalog(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    conn = await schema_connect(pg_dsn)
    try:
        extension = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'pg_trgm'")
        if extension is None:
            pytest.fail("the test server has no pg_trgm (the issue says it is available)")
    finally:
        await conn.close()
    info = await db.storage_info()  # the store created its trigram index with the extension there
    assert (info["trigram"], info["pg_trgm"]) == ("indexed", extension)
    code, report = doctor(tmp_path, pg_dsn)
    assert code == 0 and "substring search uses a pg_trgm index" in check(report, "fts")["detail"]
    await raw(pg_dsn, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'messages_hermes_trgm_idx'::regclass")
    assert (await db.storage_info())["trigram"] == "available"
    problems = await db.integrity_problems()
    assert any(p.startswith("index messages_hermes_trgm_idx on messages is invalid") for p in problems)
    await raw(pg_dsn, "DROP INDEX messages_hermes_trgm_idx")
    assert "missing index(es): messages_hermes_trgm_idx" in await db.integrity_problems()


async def test_disabled_and_unvalidated_foreign_keys(db: SessionDB, pg_dsn: str) -> None:
    await raw(pg_dsn, "ALTER TABLE session_model_usage DISABLE TRIGGER ALL")
    assert "foreign keys not enforced (triggers disabled) on: session_model_usage" in await db.integrity_problems()
    await raw(
        pg_dsn,
        "ALTER TABLE session_model_usage ENABLE TRIGGER ALL",
        "ALTER TABLE messages DROP CONSTRAINT fk_messages_session_id",
        "ALTER TABLE messages ADD CONSTRAINT fk_messages_session_id "
        "FOREIGN KEY (session_id) REFERENCES sessions(id) NOT VALID",
    )
    problems = await db.integrity_problems()
    assert "foreign key(s) added NOT VALID, existing rows unchecked: fk_messages_session_id" in problems
    assert not any("not enforced" in p for p in problems)


# ------------------------------------------------------------------ rows


async def test_counter_drift_is_reported(db: SessionDB, pg_dsn: str) -> None:
    await raw(pg_dsn, "UPDATE sessions SET message_count = 7 WHERE id = 's1'", "UPDATE sessions SET message_count = 0 WHERE id = 's2'")
    assert "message_count disagrees with the stored rows in 2 session(s): s1 counts 7, holds 4, s2 counts 0, holds 1" in (
        await db.integrity_problems()
    )


async def test_counter_above_the_rows_is_reported_even_after_a_rewind(db: SessionDB, pg_dsn: str) -> None:
    ids = [m["id"] for m in await db.get_messages("s1")]
    await db.rewind_to_message("s1", ids[2])  # counts 4 with 2 rows inactive: legitimate
    assert await db.integrity_problems() == []
    await raw(pg_dsn, "UPDATE sessions SET message_count = 5 WHERE id = 's1'")
    assert any(p.endswith("s1 counts 5, holds 4") for p in await db.integrity_problems())


async def test_orphaned_rows_are_reported(db: SessionDB, pg_dsn: str) -> None:
    await raw(
        pg_dsn,
        "SET session_replication_role = replica",
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('ghost', 'user', 'a', 1), ('ghost', 'user', 'b', 2)",
        "INSERT INTO session_model_usage (session_id, model) VALUES ('gone', 'm')",
        "UPDATE sessions SET parent_session_id = 'vanished' WHERE id = 's2'",
        "UPDATE sessions SET system_prompt_hash = 'no-such-hash' WHERE id = 's1'",
    )
    problems = await db.integrity_problems()
    assert "messages of missing sessions: 1 missing session id(s): ghost (2 rows)" in problems
    assert "usage rows of missing sessions: 1 missing session id(s): gone (1 row)" in problems
    assert "sessions whose parent_session_id names no session: 1: s2" in problems
    assert "sessions whose system_prompt_hash names no stored prompt: 1: s1" in problems


async def test_problems_are_capped(db: SessionDB, pg_dsn: str) -> None:
    drops = [f"DROP INDEX {name}" for name in ("idx_sessions_source", "idx_sessions_parent")]
    invalid = [
        f"CREATE INDEX doctor_{i} ON messages (role)" for i in range(25)
    ] + ["UPDATE pg_index SET indisvalid = false WHERE indexrelid::regclass::text LIKE 'doctor_%'"]
    await raw(pg_dsn, *drops, *invalid)
    problems = await db.integrity_problems()
    assert len(problems) == 20 and problems[0] == "missing index(es): idx_sessions_source, idx_sessions_parent"


# ------------------------------------------------------------------ leases


async def test_live_and_expired_leases_are_listed(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    assert await db.try_acquire_compression_lock("s1", "pid=1:task=compress", ttl_seconds=300)
    now = time.time()
    await raw(
        pg_dsn,
        "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) "
        f"VALUES ('s2', 'crashed-worker', {now - 900}, {now - 600})",
    )
    leases = await db.compression_leases()
    assert [(row["session_id"], row["holder"], row["live"]) for row in leases] == [
        ("s2", "crashed-worker", False), ("s1", "pid=1:task=compress", True),
    ]
    assert leases[0]["expires_at"] == pytest.approx(now - 600)
    code, report = doctor(tmp_path, pg_dsn)
    assert code == 0  # an expired lease guards nothing: a warning
    assert check(report, "leases") == {
        "check": "leases",
        "status": "warn",
        "detail": "1 live, 1 expired: compression s1 held by pid=1:task=compress; expired, guarding nothing "
        "(the next acquirer replaces them, doctor --repair removes them): compression s2 of crashed-worker",
    }
    assert await db.try_acquire_compression_lock("s2", "successor")  # and it really is replaced
    assert [row["holder"] for row in await db.compression_leases()] == ["pid=1:task=compress", "successor"]


# ------------------------------------------------------------------ doctor --repair


async def test_repair_fixes_what_is_safe_and_leaves_orphans_for_a_person(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    assert await db.try_acquire_compression_lock("s1", "pid=1:task=live", ttl_seconds=300)
    now = time.time()
    await raw(
        pg_dsn,
        "UPDATE sessions SET message_count = 9 WHERE id = 's1'",
        "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) "
        f"VALUES ('s2', 'crashed-worker', {now - 900}, {now - 600})",
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'messages_hermes_trgm_idx'::regclass",
        "DROP INDEX idx_sessions_source",
        "SET session_replication_role = replica",
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('ghost', 'user', 'a', 1)",
    )
    done = run_cli(tmp_path, "--db", pg_dsn, "doctor", "--repair")
    assert done.returncode == 1 and done.stderr == ""  # the orphan remains: not ok
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("repair:"))
    assert lines[start] == (
        "repair: 4 step(s); integrity now: messages of missing sessions: 1 missing session id(s): ghost (1 row)"
    )
    assert lines[start + 1:] == [
        "  - restored by the schema reconcile: missing index(es): idx_sessions_source",
        "  - rebuilt invalid index messages_hermes_trgm_idx on messages",
        "  - recounted message_count of 1 session(s): s1 9 -> 4",
        "  - removed 1 expired compression lease(s): s2 of crashed-worker",
    ]
    assert await db.integrity_problems() == ["messages of missing sessions: 1 missing session id(s): ghost (1 row)"]
    assert [(lease["key"], lease["live"]) for lease in await db.leases()] == [("s1", True)]
    assert (await db.storage_info())["trigram"] == "indexed"
    await raw(pg_dsn, "DELETE FROM messages WHERE session_id = 'ghost'")  # what a person decides
    code, report = doctor(tmp_path, pg_dsn, "--repair")
    assert code == 0 and report["repair"]["note"] == "nothing to repair"


async def test_an_index_that_cannot_be_rebuilt_is_reported(db: SessionDB, pg_dsn: str, tmp_path: Path) -> None:
    # What a failed CREATE INDEX CONCURRENTLY leaves: an invalid index (here over duplicates, so no REINDEX helps).
    conn = await schema_connect(pg_dsn)
    try:
        with pytest.raises(Exception, match="could not create unique index"):
            await conn.execute("CREATE UNIQUE INDEX CONCURRENTLY doctor_roles ON messages (role)")
    finally:
        await conn.close()
    code, report = doctor(tmp_path, pg_dsn, "--repair")
    assert code == 1 and report["ok"] is False
    [step] = report["repair"]["steps"]
    assert step.startswith("could not rebuild index doctor_roles: could not create unique index")
    assert report["repair"]["integrity"].startswith("index doctor_roles on messages is invalid")
    assert await db.search_messages("turn") != []  # the store's own indexes are untouched


# ------------------------------------------------------------------ pages (amcheck)


async def test_amcheck_finds_a_damaged_index_page(pg_admin_dsn: str, tmp_path: Path) -> None:
    # A database of its own: installing amcheck and damaging a file must not reach other runs.
    import asyncpg

    async for url in temporary_database(pg_admin_dsn):
        store = SessionDB(store_dsn(url))
        admin = await asyncpg.connect(url)
        try:
            await store.create_session("s1", "cli")
            await store.append_messages_batch("s1", [{"role": "user", "content": f"turn {i}"} for i in range(50)])
            code, report = doctor(tmp_path, store_dsn(url))
            assert "amcheck not installed" in check(report, "integrity")["detail"]
            await admin.execute("CREATE EXTENSION amcheck")
            assert await store.integrity_problems() == []
            assert (await store.storage_info())["amcheck"] is True
            code, report = doctor(tmp_path, store_dsn(url))
            assert code == 0 and check(report, "integrity")["detail"] == "no problems found (pages verified by amcheck)"

            # A rebuilt index is written around shared buffers, so the next read of it comes
            # from the file: overwrite the file and that read meets a damaged page.
            await admin.execute("REINDEX INDEX idx_sessions_source")
            path = await admin.fetchval(
                "SELECT current_setting('data_directory') || '/' || pg_relation_filepath('idx_sessions_source')"
            )
            await admin.execute(f"COPY (SELECT repeat('x', 8191) FROM generate_series(1, 4)) TO '{path}'")
            problems = await store.integrity_problems()
            assert [p for p in problems if "amcheck" in p] == [
                "index idx_sessions_source fails amcheck: invalid page in block 0 of relation "
                + await admin.fetchval("SELECT pg_relation_filepath('idx_sessions_source')")
            ]
            code, report = doctor(tmp_path, store_dsn(url))
            assert code == 1 and "idx_sessions_source fails amcheck" in check(report, "integrity")["detail"]
        finally:
            await admin.close()
            await store.close()
