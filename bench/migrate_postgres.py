"""Time of the in-place PostgreSQL migration from async-hermes-agent's anchor layout, against a copy.

A fresh database of its own gets, in one schema, upstream's anchor layout (``tests/upstream_pg.py``: VARCHAR
ids, INTEGER counters, payload snapshots, the expression search index) and
``--messages`` rows over ``--sessions`` sessions, one in ``--structured``
holding structured content (snapshot object, JSON text in ``content``), all
written in bulk with SQL. Then:

  migrate  the first ``SessionDB`` open: the whole migration, one transaction
  copy     the limit it is compared with, on an identical second schema: one
           ``CREATE TABLE ... AS SELECT`` of ``messages`` plus a GIN index on
           the search expression (one rewrite of the big table and one index
           build; the migration does two rewrites, see below)
  reopen   a second open of the migrated schema (catalog check only)

The migration rewrites ``messages`` twice (INTEGER -> BIGINT ``token_count`` with
the snapshot column dropped, then the stored search column) and rebuilds its
indexes; the ratio shows what that costs over the floor of one copy. The report
also checks the migrated rows: counts and one structured message read back.

    python3 bench/migrate_postgres.py                      # 100,000 messages
    python3 bench/migrate_postgres.py --messages 10000     # smoke run

The server comes from ``--dsn``, else ``HERMES_TEST_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.upstream_pg import build_layout  # noqa: E402

_FILL_SESSIONS = """
INSERT INTO sessions (id, source, expiry_finalized, model, payload, started_at, message_count, tool_call_count,
    input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, archived, pinned,
    last_active, api_call_count, compression_fallback_streak, compression_ineffective_count, rewind_count)
SELECT 's-' || i, 'cli', 0, 'gpt-x',
       json_build_object('id', 's-' || i, 'source', 'cli', 'model', 'gpt-x', 'cwd', '/work/' || i)::text,
       1700000000 + i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1700000000 + i, 0, 0, 0, 0
FROM generate_series(1, $1) AS i
"""
# Every ``$3``-th message holds structured content: its snapshot keeps the object, ``content`` its JSON.
_FILL_MESSAGES = """
INSERT INTO messages (session_id, payload, role, content, timestamp, token_count, observed, active, compacted)
SELECT 's-' || (1 + i % $2),
       CASE WHEN i % $3 = 0
            THEN json_build_object('role', 'assistant', 'content', json_build_object('n', i, 'parts', json_build_array('a', i)))::text
            ELSE json_build_object('role', 'user', 'content', 'message number ' || i || ' about postgres migrations')::text END,
       CASE WHEN i % $3 = 0 THEN 'assistant' ELSE 'user' END,
       CASE WHEN i % $3 = 0 THEN json_build_object('n', i, 'parts', json_build_array('a', i))::text
            ELSE 'message number ' || i || ' about postgres migrations' END,
       1700000000 + i, 12, 0, 1, 0
FROM generate_series(1, $1) AS i
"""


async def _fill(conn: Any, messages: int, sessions: int, every: int) -> None:
    await build_layout(conn, "anchor")
    await conn.execute(_FILL_SESSIONS, sessions)
    await conn.execute(_FILL_MESSAGES, messages, sessions, every)
    await conn.execute("UPDATE sessions AS s SET message_count = c.n FROM "
                       "(SELECT session_id, count(*) AS n FROM messages GROUP BY session_id) AS c WHERE c.session_id = s.id")
    await conn.execute("ANALYZE")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dsn", default=os.environ.get("HERMES_TEST_POSTGRES_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--structured", type=int, default=5, help="one message in N holds structured content")
    args = parser.parse_args()

    import asyncpg

    from hermes_state.postgres import SessionDB

    # A database of its own: the migration lock spans a database, and other runs' opens would take it.
    server = await asyncpg.connect(args.dsn)
    database = f"hs_bench_{uuid.uuid4().hex}"
    await server.execute(f'CREATE DATABASE "{database}"')
    url = args.dsn.split("?", 1)[0].rsplit("/", 1)[0] + f"/{database}"
    admin = await asyncpg.connect(url)
    schemas = ["migrated", "copied"]
    try:
        for schema in schemas:
            await admin.execute(f'CREATE SCHEMA "{schema}"')
            await admin.execute(f'SET search_path TO "{schema}"')
            await _fill(admin, args.messages, args.sessions, args.structured)
        size = await admin.fetchval("SELECT pg_total_relation_size('messages')")

        # the limit: one copy of the big table and one GIN build, in one transaction
        await admin.execute(f'SET search_path TO "{schemas[1]}"')
        started = time.perf_counter()
        async with admin.transaction():
            await admin.execute("CREATE TABLE messages_copy AS SELECT * FROM messages")
            await admin.execute("CREATE INDEX ON messages_copy USING GIN (to_tsvector('simple', "
                                "coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, '')))")
        copy = time.perf_counter() - started

        dsn = "postgresql+asyncpg://" + url.split("://", 1)[1] + f"?search_path={schemas[0]}"
        started = time.perf_counter()
        db = SessionDB(dsn)
        await db.get_session("s-1")
        migrate = time.perf_counter() - started
        facts = dict(db._backend._facts)  # type: ignore[attr-defined]
        total = await db.message_count()
        structured = next(m for m in await db.get_messages("s-1") if m["role"] == "assistant")["content"]
        await db.close()
        started = time.perf_counter()
        async with SessionDB(dsn) as again:
            await again.get_session("s-1")
            reopened = dict(again._backend._facts)  # type: ignore[attr-defined]
        reopen = time.perf_counter() - started

        ok = (facts.get("reconciled") is True and reopened.get("reconciled") is False and total == args.messages
              and isinstance(structured, dict))
        print(f"messages {args.messages:,} in {args.sessions:,} sessions, 1 in {args.structured} structured; "
              f"messages table {size / 2**20:.1f} MiB; load average {os.getloadavg()[0]:.1f}")
        print(f"migrate {migrate:.2f} s   copy (limit) {copy:.2f} s   ratio {migrate / copy:.2f}   "
              f"reopen {reopen * 1000:.0f} ms")
        print("rows check:", "ok" if ok else f"FAILED ({facts}, {reopened}, {total}, {structured!r})")
        return 0 if ok else 2
    finally:
        await admin.close()
        await server.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
