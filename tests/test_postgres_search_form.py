"""The relevance statement's two forms on PostgreSQL (``queries.search_form``): the column
statistics choose reading every match from the GIN bitmap for a word in a few percent of
the messages, leave common words, prefixes and filtered searches to the planner, and
either form returns the same page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermes_state.postgres import SessionDB as PostgresSessionDB
from hermes_state.postgres.queries import search_form
from hermes_state.postgres.queries.search import word_search_form, word_search_statement
from hermes_state.postgres.schema import SEARCH_INDEX

from .postgres_support import admin_connect, server_dsn, store_dsn, temporary_schema

ROWS = 3000


def _text(i: int) -> str:
    words = ["the", f"filler{i % 7}"]
    if i % 50 == 0:  # 2% of the rows
        words += ["kiwi"] * (1 + i % 3)
    if i % 600 == 0:
        words.append("rarely")
    return " ".join(words)


@pytest.fixture
async def corpus() -> AsyncIterator[tuple[PostgresSessionDB, Any]]:
    """(store, admin connection in its schema) over ROWS messages, not yet analyzed."""
    admin = server_dsn()
    async for schema in temporary_schema(admin):
        async with PostgresSessionDB(store_dsn(admin, schema)) as db:
            await db.create_session("s", "cli")
            await db.append_messages_batch("s", [{"role": "user", "content": _text(i)} for i in range(ROWS)])
            conn = await admin_connect(admin)
            try:
                await conn.execute(f'SET search_path TO "{schema}"')
                yield db, conn
            finally:
                await conn.close()
                search_form._cache.clear()


async def _ids(conn: Any, text: str, limit: int, offset: int, bitmap: bool) -> list[int]:
    statement = word_search_statement(text, limit, offset, bitmap=bitmap)
    assert statement is not None
    return [r["id"] for r in await conn.fetch(statement[0], *statement[1])]


async def test_statistics_choose_the_bitmap_for_a_word_in_a_few_percent(corpus: tuple[PostgresSessionDB, Any]) -> None:
    db, conn = corpus
    # No statistics yet: the planner chooses alone.
    assert await word_search_form(conn, "kiwi") is False
    search_form._cache.clear()
    await conn.execute("ANALYZE messages")
    assert await word_search_form(conn, "kiwi") is True
    assert await word_search_form(conn, "rarely") is True
    assert await word_search_form(conn, "kiwi rarely") is True
    assert await word_search_form(conn, "the") is False  # in every row: the newest rows hold the page
    assert await word_search_form(conn, "kiw*") is False  # prefixes stay with the planner
    assert await word_search_form(conn, "the OR kiwi") is False
    statement = word_search_statement("kiwi", bitmap=True)
    assert statement is not None
    await conn.execute("SET enable_seqscan = off")  # 3,000 short rows would otherwise be scanned
    plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + statement[0], *statement[1]))
    assert SEARCH_INDEX in plan and "Backward" not in plan, plan


async def test_either_form_returns_the_same_pages(corpus: tuple[PostgresSessionDB, Any]) -> None:
    db, conn = corpus
    await conn.execute("ANALYZE messages")
    for text in ("kiwi", "the", "kiwi NOT rarely", "the kiwi"):
        for limit, offset in ((20, 0), (7, 13), (50, 480), (30, 2990)):
            walked = await _ids(conn, text, limit, offset, bitmap=False)
            assert await _ids(conn, text, limit, offset, bitmap=True) == walked, (text, limit, offset)
            hits = await db.search_messages(text, limit=limit, offset=offset, fields=["id"])
            assert [h["id"] for h in hits] == walked, (text, limit, offset)
    assert len(await _ids(conn, "kiwi", 100, 0, bitmap=True)) == ROWS // 50
