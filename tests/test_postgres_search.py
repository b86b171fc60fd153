"""PostgreSQL search specifics: the stored vector's GIN index serves the real statement, an
older schema's expression index is replaced by it, relevance pages through windows of
matches without losing or repeating one, the pg_trgm index serves substring queries (and
a role that cannot install the extension gets a working, announced fallback), and a
search cut off by its deadline stops on the server and leaves its pooled connection usable.

The query meaning (phrases, prefixes, AND/OR/NOT) is checked on both backends.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from hermes_state import SearchTimeoutError, SessionDB
from hermes_state.methods.search import SEARCH_RESULT_FIELDS
from hermes_state.postgres import SessionDB as PostgresSessionDB
from hermes_state.postgres.queries import search as pg_search
from hermes_state.postgres.queries.search import like_scan_statement, substring_search_statement, word_search_statement
from hermes_state.postgres.schema import SEARCH_COLUMN, SEARCH_DOCUMENT, SEARCH_INDEX
from hermes_state.postgres.search_schema import CJK_INDEX, TIME_INDEX, TRIGRAM_INDEX, search_catalog, search_problems

from .postgres_support import admin_connect, server_dsn, store_dsn, temporary_database, temporary_schema


@pytest.fixture
async def pg_schema() -> AsyncIterator[tuple[str, str]]:
    """(admin DSN, fresh schema name), the schema dropped afterwards."""
    admin = server_dsn()
    async for schema in temporary_schema(admin):
        yield admin, schema


async def test_query_meaning_phrases_prefixes_and_booleans(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    texts = ["alpha beta gamma", "alpha delta", "beta gamma alpha", "docker compose up", "alphabet soup"]
    ids = [await store.append_message("s", "user", t) for t in texts]

    async def found(query: str) -> set[int]:
        return {h["id"] for h in await store.search_messages(query, limit=50)}

    assert await found('"alpha beta"') == {ids[0]}
    assert await found("alpha beta") == {ids[0], ids[2]}
    assert await found("alph*") == {ids[0], ids[1], ids[2], ids[4]}
    assert await found("alpha NOT delta") == {ids[0], ids[2]}
    assert await found("delta OR compose") == {ids[1], ids[3]}
    assert await found("gamma AND delta") == set()
    hit = (await store.search_messages('"docker compose"'))[0]
    assert hit["snippet"] == ">>>docker compose<<< up"


async def test_the_word_search_statement_uses_the_gin_index(pg_schema: tuple[str, str]) -> None:
    admin, schema = pg_schema
    db = PostgresSessionDB(store_dsn(admin, schema))
    try:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"row {i} deploy"} for i in range(200)])
    finally:
        await db.close()
    conn = await admin_connect(admin)
    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute("SET enable_seqscan = off")  # a 200-row table would otherwise be scanned
        for text in ("deploy", '"row 5"', "depl* NOT missing", "deploy OR nothing"):
            statement = word_search_statement(text)
            assert statement is not None
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + statement[0], *statement[1]))
            assert SEARCH_INDEX in plan, plan
    finally:
        await conn.close()


async def _plan(conn: Any, statement: tuple[str, list[Any]] | None) -> str:
    assert statement is not None
    return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + statement[0], *statement[1]))


async def kettle_store(admin: str, schema: str, rows: int) -> Any:
    """A store in ``schema`` holding ``rows`` messages "old row N kettle"; returns a raw connection on the schema."""
    async with PostgresSessionDB(store_dsn(admin, schema)) as db:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"old row {i} kettle"} for i in range(rows)])
    conn = await admin_connect(admin)
    await conn.execute(f'SET search_path TO "{schema}"')
    return conn


async def test_an_older_schemas_expression_index_is_replaced_by_the_stored_vector(pg_schema: tuple[str, str]) -> None:
    admin, schema = pg_schema
    dsn = store_dsn(admin, schema)
    conn = await kettle_store(admin, schema, 30)
    try:
        # The layout version-25 schemas had before the stored column: an index on the expression.
        await conn.execute(f"ALTER TABLE messages DROP COLUMN {SEARCH_COLUMN}")
        await conn.execute(f"CREATE INDEX {SEARCH_INDEX} ON messages USING GIN (({SEARCH_DOCUMENT}))")
        await conn.execute(f"DROP INDEX {TIME_INDEX}")
        assert search_problems(await search_catalog(conn)) == [
            f"table messages lacks the stored search column {SEARCH_COLUMN} (a writable open adds it)",
            f"search index {SEARCH_INDEX} is on the text expression, not {SEARCH_COLUMN} (a writable open replaces it)",
            f"missing index(es): {TIME_INDEX}",
        ]
        async with PostgresSessionDB(dsn) as db:
            assert db._backend._facts["reconciled"] is True  # type: ignore[attr-defined]
            hits = await db.search_messages("kettle", limit=100)
            assert len(hits) == 30
        indexdef = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1", SEARCH_INDEX)
        assert f"({SEARCH_COLUMN})" in indexdef and "to_tsvector" not in indexdef
        # Existing rows got their vector when the column was added.
        assert await conn.fetchval(f"SELECT count(*) FROM messages WHERE {SEARCH_COLUMN} = {SEARCH_DOCUMENT}") == 30
        assert search_problems(await search_catalog(conn)) == []
        async with PostgresSessionDB(dsn) as db:  # now current: no DDL
            await db.get_session("s")
            assert db._backend._facts["reconciled"] is False  # type: ignore[attr-defined]
    finally:
        await conn.close()


# The vector expression stores made before long messages were bounded: the whole text.
WHOLE_TEXT_DOCUMENT = (
    "to_tsvector('simple', coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))"
)


async def test_a_vector_of_the_whole_text_is_regenerated_from_the_bounded_prefix(pg_schema: tuple[str, str]) -> None:
    admin, schema = pg_schema
    dsn = store_dsn(admin, schema)
    log = " ".join(f"{i:08x}" for i in range(200_000))  # 1.8 MB of distinct words
    conn = await kettle_store(admin, schema, 5)
    try:
        await conn.execute(f"ALTER TABLE messages DROP COLUMN {SEARCH_COLUMN}")
        await conn.execute(f"ALTER TABLE messages ADD COLUMN {SEARCH_COLUMN} tsvector GENERATED ALWAYS AS ({WHOLE_TEXT_DOCUMENT}) STORED")
        await conn.execute(f"CREATE INDEX {SEARCH_INDEX} ON messages USING GIN ({SEARCH_COLUMN})")
        assert search_problems(await search_catalog(conn)) == [
            f"search column {SEARCH_COLUMN} indexes whole messages, which fails for long ones "
            "(a writable open regenerates it from their first 256 KiB)"
        ]
        with pytest.raises(Exception, match="too long for tsvector"):  # what such a schema does with a log dump
            await conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'tool', $1, 0)", log)
        async with PostgresSessionDB(dsn) as db:
            assert db._backend._facts["reconciled"] is True  # type: ignore[attr-defined]
            row_id = await db.append_message("s", "tool", log, tool_name="terminal")
            assert len(await db.search_messages("kettle", limit=100)) == 5  # old rows got their vector again
            assert [h["id"] for h in await db.search_messages("00001000")] == [row_id]
            assert (await db.get_messages("s"))[-1]["content"] == log
        assert search_problems(await search_catalog(conn)) == []
        assert await conn.fetchval(f"SELECT count(*) FROM messages WHERE {SEARCH_COLUMN} = {SEARCH_DOCUMENT}") == 6
    finally:
        await conn.close()


async def test_relevance_pages_through_windows_of_matches(
    pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, schema = pg_schema
    monkeypatch.setattr(pg_search, "RANK_WINDOW", 7)
    rng = random.Random(3)
    texts = [" ".join(["kiwi"] * rng.randint(1, 4) + ["filler"] * rng.randint(0, 6)) for _ in range(40)]
    async with PostgresSessionDB(store_dsn(admin, schema)) as db:
        await db.create_session("s", "cli")
        for text in texts:
            await db.append_message("s", "user", text)
        await db.append_message("s", "user", "no match here")
        everything = await db.search_messages("kiwi", limit=1000, fields=["id"])
        ids = [h["id"] for h in everything]
        assert sorted(ids) == sorted(set(ids)) and len(ids) == 40
        # Window k holds the matches ranked 7k+1 .. 7k+7 newest first, in relevance order inside.
        newest_first = sorted(ids, reverse=True)
        for k in range(0, 40, 7):
            assert set(ids[k:k + 7]) == set(newest_first[k:k + 7])
        counts = {h_id: texts[h_id - min(ids)].split().count("kiwi") for h_id in ids}
        for k in range(0, 40, 7):
            window = [counts[i] for i in ids[k:k + 7]]
            assert window == sorted(window, reverse=True), window
        # Any page size and offset, including pages that straddle windows, walks the same order.
        for size in (1, 3, 7, 10, 13):
            paged = []
            for offset in range(0, 45, size):
                paged += [h["id"] for h in await db.search_messages("kiwi", limit=size, offset=offset, fields=["id"])]
            assert paged == ids, size
        assert await db.search_messages("kiwi", limit=2**63 - 1, offset=38, fields=["id"]) == [{"id": i} for i in ids[38:]]


async def test_the_trigram_index_serves_substring_queries(pg_schema: tuple[str, str]) -> None:
    admin, schema = pg_schema
    async with PostgresSessionDB(store_dsn(admin, schema)) as db:
        info = await db.storage_info()
        assert info["substring_index"] == f"pg_trgm ({TRIGRAM_INDEX})"
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"row {i} plain"} for i in range(2000)])
        await db.append_message("s", "assistant", "run docker compose up, then 数据库连接失败 again")
        await db.append_message("s", "tool", "docker output", tool_name="terminal")
        hits = await db.search_messages("ocker")  # no whole word: the substring route
        assert [h["snippet"][:16] for h in hits] == ["run d>>>ocker<<<"]
        assert len(await db.search_messages("数据库连接")) == 1
    conn = await admin_connect(admin)
    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute("ANALYZE messages")
        # A small table is cheaper to walk whole: leave the planner only bitmap scans to pick from.
        await conn.execute("SET enable_seqscan = off")
        await conn.execute("SET enable_indexscan = off")
        for text in ("ocker", "数据库连接", "ocker NOT ompose", "ocker OR 据库连"):
            plan = await _plan(conn, substring_search_statement(text))
            assert TRIGRAM_INDEX in plan, plan
            # The first try reads the newest rows through the time index.
            await conn.execute("SET enable_indexscan = on")
            plan = await _plan(conn, substring_search_statement(text, probe=True))
            assert TIME_INDEX in plan, plan
            await conn.execute("SET enable_indexscan = off")
    finally:
        await conn.close()


async def test_substring_pages_are_exact_whether_the_newest_rows_hold_them_or_not(
    pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, schema = pg_schema
    monkeypatch.setattr(pg_search, "PROBE_ROWS", 6)
    rng = random.Random(5)
    rows = [(rng.choice(["docker compose", "docker only", "plain words"]), rng.uniform(1e6, 2e6)) for _ in range(60)]
    async with PostgresSessionDB(store_dsn(admin, schema)) as db:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": t, "timestamp": ts} for t, ts in rows])
        stored = {m["id"]: (m["content"], m["timestamp"]) for m in await db.get_messages("s")}

        def expected(keep: Any, sort: str | None) -> list[int]:
            ids = [i for i, (text, _) in stored.items() if keep(text)]
            return sorted(ids, key=lambda i: (stored[i][1], i), reverse=sort != "oldest")

        cases = {"ocker": lambda t: "ocker" in t, "ocker NOT ompose": lambda t: t == "docker only",
                 "ompose OR lain": lambda t: t != "docker only"}
        for query, keep in cases.items():
            for sort in (None, "oldest"):
                want = expected(keep, sort)
                for size in (1, 4, 7, 50):
                    got = []
                    for offset in range(0, 64, size):
                        page = await db.search_messages(query, limit=size, offset=offset, sort=sort, fields=["id"])
                        got += [h["id"] for h in page]
                    assert got == want, (query, sort, size)


async def test_short_cjk_terms_walk_the_rows_holding_cjk_newest_first(pg_schema: tuple[str, str]) -> None:
    admin, schema = pg_schema
    async with PostgresSessionDB(store_dsn(admin, schema)) as db:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"row {i} plain"} for i in range(2000)])
        ids = [
            await db.append_message("s", "user", "服务器返回错误"),
            await db.append_message("s", "tool", "命令错误", tool_name="terminal"),  # tool rows count on this route
            await db.append_message("s", "assistant", "没有问题"),
            await db.append_message("s", "assistant", "서버 오류 발생"),
        ]
        assert [h["id"] for h in await db.search_messages("错误")] == [ids[1], ids[0]]
        assert [h["id"] for h in await db.search_messages("서버 错误")] == [ids[3], ids[1], ids[0]]
        assert [h["id"] for h in await db.search_messages("row 错误", limit=3)][:1] == [ids[1]]  # not all CJK: no index
    conn = await admin_connect(admin)
    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute("ANALYZE messages")
        await conn.execute("SET enable_seqscan = off")
        for text in ("错误", "서버 错误"):
            plan = await _plan(conn, like_scan_statement(text, probe=True))
            assert CJK_INDEX in plan, plan
    finally:
        await conn.close()


@pytest.fixture
async def unprivileged_database() -> AsyncIterator[tuple[str, str, str]]:
    """A fresh database without pg_trgm and a role that may not create extensions in it.

    Yields (admin DSN of that database, the role's store DSN, its schema); both dropped afterwards.
    """
    admin = server_dsn()
    suffix = uuid.uuid4().hex[:12]
    database, role, schema = f"hs_test_db_{suffix}", f"hs_test_role_{suffix}", "store"
    conn = await admin_connect(admin)
    db_admin = admin.rsplit("/", 1)[0] + "/" + database
    try:
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
        await conn.execute(f'CREATE DATABASE "{database}"')
        inner = await admin_connect(db_admin)
        try:
            assert await inner.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'") == 0
            await inner.execute(f'REVOKE CREATE ON DATABASE "{database}" FROM PUBLIC')
            await inner.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
        finally:
            await inner.close()
        parts = urlsplit(db_admin)
        host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
        yield db_admin, store_dsn(urlunsplit(parts._replace(netloc=f"{role}@{host}")), schema), schema
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        await conn.close()


async def test_without_pg_trgm_substring_search_scans_and_says_so(
    unprivileged_database: tuple[str, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    db_admin, role_dsn, schema = unprivileged_database
    with caplog.at_level(logging.WARNING, logger="hermes_state.postgres"):
        async with PostgresSessionDB(role_dsn) as db:
            info = await db.storage_info()
            assert info["substring_index"].startswith("none: ILIKE scan (CREATE EXTENSION pg_trgm failed")
            await db.create_session("s", "cli")
            await db.append_message("s", "user", "run docker compose up, then 数据库连接失败 again")
            assert [h["snippet"][:16] for h in await db.search_messages("ocker")] == ["run d>>>ocker<<<"]
            assert len(await db.search_messages("数据库连接")) == 1
            assert len(await db.search_messages("docker")) == 1
    assert any("no pg_trgm index" in r.getMessage() for r in caplog.records)
    conn = await admin_connect(db_admin)
    try:
        assert await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".{TRIGRAM_INDEX}') is None
        # An administrator installs the extension: the role's next open adds the index.
        await conn.execute("CREATE EXTENSION pg_trgm")
        async with PostgresSessionDB(role_dsn) as db:
            assert (await db.storage_info())["substring_index"] == f"pg_trgm ({TRIGRAM_INDEX})"
            assert len(await db.search_messages("ocker")) == 1
        assert await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".{TRIGRAM_INDEX}') is not None
    finally:
        await conn.close()


async def test_pg_trgm_goes_to_public_so_dropping_one_stores_schema_spares_the_others() -> None:
    """Two stores in two schemas of a database without pg_trgm: the first installs it, in public."""
    async for database in temporary_database(server_dsn()):
        conn = await admin_connect(database)
        try:
            await conn.execute('CREATE SCHEMA "first"; CREATE SCHEMA "second"')
            for schema in ("first", "second"):
                async with PostgresSessionDB(store_dsn(database, schema)) as db:
                    assert (await db.storage_info())["substring_index"] == f"pg_trgm ({TRIGRAM_INDEX})"
            place = "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
            assert await conn.fetchval(place) == "public"
            await conn.execute('DROP SCHEMA "first" CASCADE')
            assert await conn.fetchval("SELECT to_regclass($1)", f'"second".{TRIGRAM_INDEX}') is not None
            async with PostgresSessionDB(store_dsn(database, "second")) as db:
                await db.create_session("s", "cli")
                await db.append_message("s", "user", "run docker compose up")
                assert [h["snippet"][:16] for h in await db.search_messages("ocker")] == ["run d>>>ocker<<<"]
        finally:
            await conn.close()


async def test_deadline_cancels_the_search_on_the_server(pg_schema: tuple[str, str], hermes_home: Path) -> None:
    admin, schema = pg_schema
    (hermes_home / "config.yaml").write_text("sessions:\n  search_timeout_ms: 300\n")
    db = PostgresSessionDB(store_dsn(admin, schema))
    blocker = await admin_connect(admin)
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "deploy notes")
        # An exclusive lock makes the search wait on the server until it is cancelled.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(f'LOCK TABLE "{schema}".messages IN ACCESS EXCLUSIVE MODE')
        started = time.monotonic()
        with pytest.raises(SearchTimeoutError):
            await db.search_messages("deploy")
        assert time.monotonic() - started < 5
        # The cancelled statement no longer waits on the server.
        waiting = -1
        for _ in range(50):
            waiting = await blocker.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ts_rank%' "
                "AND pid <> pg_backend_pid() AND datname = current_database()"
            )
            if waiting == 0:
                break
            await asyncio.sleep(0.1)
        assert waiting == 0
        await tx.rollback()
        hits: list[dict[str, Any]] = await db.search_messages("deploy")
        assert [h["snippet"] for h in hits] == [">>>deploy<<< notes"]
    finally:
        await blocker.close()
        await db.close()


HOSTILE = [
    "'", "\\", "\\'", "a:*", "!", "!!", "&", "|", "<->", "a & b", "a | !b", "(a", "a)", ":*", "*", "**a", "a*b*",
    '"unterminated', '""', '"a" "b"*', "NOT", "OR OR", "a OR OR b", "a NOT NOT b", "NEAR(a b)", "a:b", "x\x00y",
    "\ud800", "caf\u00e9*", "%", "_", "100%*", "deploy'*", "'deploy'", "de\\ploy*", "数据*", "数 据", "a" * 3000,
]


async def test_hostile_queries_never_raise(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "deploy the café service with 100% of the data")
    await store.append_message("s", "assistant", "数据库 ready: a & b | c")
    rng = random.Random(7)
    alphabet = "ab '\"*:!&|()<>-%_\\\u00e9数"
    queries = HOSTILE + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(150)]
    for text in queries:
        hits = await store.search_messages(text)
        assert isinstance(hits, list), text
        for hit in hits:
            assert list(hit) == list(SEARCH_RESULT_FIELDS), text


async def test_every_route_brings_the_same_context_windows(store: SessionDB) -> None:
    # The relevance and substring statements read the windows with the hits; the time-sorted
    # word route asks for them afterwards: each hit's window is its neighbours in the session.
    await store.create_session("s", "cli")
    texts = ["start here", "run docker compose", "plain reply", "数据库连接失败 错误", "docker again", "last words"]
    for i, text in enumerate(texts):
        await store.append_message("s", "user" if i % 2 == 0 else "assistant", text)
    stored = await store.get_messages("s")
    window = {
        m["id"]: [{"role": n["role"], "content": n["content"]} for n in stored[max(0, i - 1) : i + 2]]
        for i, m in enumerate(stored)
    }
    for query, sort in (("docker", None), ("docker", "newest"), ("docker", "oldest"), ("ocker", None),
                        ("数据库连接", None), ("错误", None)):
        hits = await store.search_messages(query, sort=sort)
        assert hits, query
        for hit in hits:
            assert hit["context"] == window[hit["id"]], (query, sort)
        assert [list(h) for h in hits] == [list(SEARCH_RESULT_FIELDS)] * len(hits)
