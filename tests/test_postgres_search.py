"""PostgreSQL search specifics: the GIN index serves the real statement, and a search
cut off by its deadline stops on the server and leaves its pooled connection usable.

The query meaning (phrases, prefixes, AND/OR/NOT) is checked on both backends.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SearchTimeoutError, SessionDB
from hermes_state.methods.search import SEARCH_RESULT_FIELDS
from hermes_state.postgres import SessionDB as PostgresSessionDB
from hermes_state.postgres.queries.search import word_search_statement
from hermes_state.postgres.schema import SEARCH_INDEX

from .postgres_support import admin_connect, server_dsn, store_dsn, temporary_schema


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
