"""The search objects of the PostgreSQL schema: the stored ``tsvector`` column, its GIN index, and
the optional ``pg_trgm`` index for substring queries.

``messages.search_vector`` is a ``GENERATED ALWAYS AS (SEARCH_DOCUMENT) STORED``
column: PostgreSQL fills it in every INSERT and UPDATE, so the writer's
statements never name it, and ranking reads the stored vector instead of
parsing each hit's text again. ``messages_hermes_search_idx`` (the
reference's name) is a GIN index on that column; schemas made before the
column existed have it on the expression, and reconciling replaces it.

``messages_hermes_time_idx`` on ``(timestamp, id)`` serves the routes that
order hits newest (or oldest) first: a substring that occurs in many messages,
or a word search with ``sort="newest"``, walks it backwards and stops after a
page instead of sorting every match.

``messages_hermes_cjk_idx`` is the same order over the rows that hold CJK
text (:data:`CJK_ROWS`, a few percent of a typical store): the CJK LIKE
route (terms too short for trigrams, e.g. ``错误``) walks only those rows,
newest first, instead of scanning the table.

The trigram index (``messages_hermes_trgm_idx``, GIN ``gin_trgm_ops`` on
:data:`TRIGRAM_DOCUMENT`, content, tool_name and tool_calls of non-tool rows,
the rows SQLite's trigram index holds) needs the ``pg_trgm`` extension. One
expression rather than three columns lets every term of a query be a
condition on the same index, which GIN intersects in one scan. Reconciling
creates the extension when the role may (``CREATE EXTENSION`` needs the
database's CREATE privilege), in ``public`` where it may: dropping a store's
own schema would otherwise take the extension, and every other schema's
trigram index, with it. When it may not, substring and CJK queries still work,
as sequential ``ILIKE`` scans, and the store says so (a log line at open and
``storage_info()['substring_index']``). Once an administrator installs the
extension, the next writable open adds the index.

Everything here runs inside :func:`schema.ensure_schema`'s advisory-locked
transaction.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ..search_text.sanitize import CJK_RANGES

__all__ = [
    "CJK_INDEX",
    "CJK_ROWS",
    "SEARCH_COLUMN",
    "SEARCH_DOCUMENT",
    "SEARCH_INDEX",
    "TIME_INDEX",
    "TRIGRAM_DOCUMENT",
    "TRIGRAM_INDEX",
    "SearchCatalog",
    "reconcile_search",
    "search_catalog",
    "search_facts",
    "search_problems",
]

log = logging.getLogger("hermes_state.postgres")

# What the word index covers (the reference's three columns, parser 'simple').
SEARCH_DOCUMENT = (
    "to_tsvector('simple', coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))"
)
SEARCH_COLUMN = "search_vector"
SEARCH_INDEX = "messages_hermes_search_idx"
TIME_INDEX = "messages_hermes_time_idx"
CJK_INDEX = "messages_hermes_cjk_idx"
# The code points spec section 4.3 counts as CJK, as a regex class built with chr() so the SQL
# text stays ASCII.
_CJK_CLASS = "'[' || " + " || ".join(f"chr({a}) || '-' || chr({b})" for a, b in CJK_RANGES) + " || ']'"
# True for a row holding CJK text in a searched column; a query must repeat it verbatim.
CJK_ROWS = f"((coalesce(content, '') || coalesce(tool_name, '') || coalesce(tool_calls, '')) ~ ({_CJK_CLASS}))"
TRIGRAM_INDEX = "messages_hermes_trgm_idx"
# What the trigram index covers; a query must repeat it verbatim. A term matching one of the
# three columns matches this text too, so ``TRIGRAM_DOCUMENT ILIKE p`` may narrow a per-column test.
TRIGRAM_DOCUMENT = (
    "(coalesce(content, '') || chr(10) || coalesce(tool_name, '') || chr(10) || coalesce(tool_calls, ''))"
)


class SearchCatalog(NamedTuple):
    """What the current schema holds of the search objects."""

    column: bool  # messages.search_vector exists
    index_def: str | None  # pg_get_indexdef of SEARCH_INDEX, None when absent
    time_index: bool
    cjk_index: bool
    trigram_schema: str | None  # schema pg_trgm is installed in, None when not installed
    trigram_index: bool

    @property
    def index_on_column(self) -> bool:
        return self.index_def is not None and SEARCH_COLUMN in self.index_def

    @property
    def current(self) -> bool:
        """True when no DDL is needed (the trigram index only counts once the extension exists)."""
        return (
            self.column
            and self.index_on_column
            and self.time_index
            and self.cjk_index
            and (self.trigram_schema is None or self.trigram_index)
        )


async def search_catalog(conn: Any) -> SearchCatalog:
    """The search objects of the current schema (``messages`` may not exist yet)."""
    row = await conn.fetchrow(
        "SELECT "
        "EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass('messages') "
        "  AND a.attname = $1 AND NOT a.attisdropped) AS col, "
        "(SELECT pg_get_indexdef(i.oid) FROM pg_class i JOIN pg_namespace n ON n.oid = i.relnamespace "
        "  WHERE n.nspname = current_schema() AND i.relname = $2) AS idx, "
        "(SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "  WHERE e.extname = 'pg_trgm') AS trgm, "
        "EXISTS (SELECT 1 FROM pg_class i JOIN pg_namespace n ON n.oid = i.relnamespace "
        "  WHERE n.nspname = current_schema() AND i.relname = $3) AS trgm_idx, "
        "EXISTS (SELECT 1 FROM pg_class i JOIN pg_namespace n ON n.oid = i.relnamespace "
        "  WHERE n.nspname = current_schema() AND i.relname = $4) AS time_idx, "
        "EXISTS (SELECT 1 FROM pg_class i JOIN pg_namespace n ON n.oid = i.relnamespace "
        "  WHERE n.nspname = current_schema() AND i.relname = $5) AS cjk_idx",
        SEARCH_COLUMN, SEARCH_INDEX, TRIGRAM_INDEX, TIME_INDEX, CJK_INDEX,
    )
    return SearchCatalog(
        bool(row["col"]), row["idx"], bool(row["time_idx"]), bool(row["cjk_idx"]), row["trgm"], bool(row["trgm_idx"])
    )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _install_trigram(conn: Any) -> tuple[str | None, str]:
    """Create ``pg_trgm`` if the role may; returns (its schema or None, why not)."""
    import asyncpg  # type: ignore[import-untyped]

    # An extension is one per database, but lives in one schema, and dropping that
    # schema drops every trigram index built on it. Unqualified, it would land in
    # this store's own schema (first on its search path), so stores sharing a
    # database in several schemas would all hang on the first one's: put it in
    # public where the role may, and in the search path's schema only otherwise.
    failure: Exception | None = None
    for statement in ("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public", "CREATE EXTENSION IF NOT EXISTS pg_trgm"):
        try:
            async with conn.transaction():  # a savepoint: a refusal must not abort the reconcile
                await conn.execute(statement)
            break
        except asyncpg.PostgresError as exc:  # no privilege, no public schema, or no extension on the server
            failure = exc
    else:
        return None, f"CREATE EXTENSION pg_trgm failed: {failure}"
    schema = await conn.fetchval(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
    )
    return schema, ""


async def reconcile_search(conn: Any, catalog: SearchCatalog) -> dict[str, Any]:
    """Create what is missing of the search objects (``messages`` exists); returns :func:`search_facts`."""
    if not catalog.column:
        # Rewrites the table once: existing rows get their vector computed here.
        await conn.execute(
            f"ALTER TABLE messages ADD COLUMN IF NOT EXISTS {_ident(SEARCH_COLUMN)} tsvector "
            f"GENERATED ALWAYS AS ({SEARCH_DOCUMENT}) STORED"
        )
    if catalog.index_def is not None and not catalog.index_on_column:
        await conn.execute(f"DROP INDEX {_ident(SEARCH_INDEX)}")  # the expression index of older schemas
    if not catalog.index_on_column:
        await conn.execute(f"CREATE INDEX {_ident(SEARCH_INDEX)} ON messages USING GIN ({_ident(SEARCH_COLUMN)})")
    if not catalog.time_index:
        await conn.execute(f'CREATE INDEX IF NOT EXISTS {_ident(TIME_INDEX)} ON messages ("timestamp", id)')
    if not catalog.cjk_index:
        await conn.execute(f'CREATE INDEX IF NOT EXISTS {_ident(CJK_INDEX)} ON messages ("timestamp", id) WHERE {CJK_ROWS}')
    trigram_schema, why = catalog.trigram_schema, "pg_trgm is not installed"
    if trigram_schema is None:
        trigram_schema, why = await _install_trigram(conn)
    trigram = catalog.trigram_index
    if trigram_schema is not None and not trigram:
        trigram, why = await _create_trigram_index(conn, trigram_schema)
    return search_facts(trigram, why)


async def _create_trigram_index(conn: Any, trigram_schema: str) -> tuple[bool, str]:
    """Create the trigram index with the extension's operator class; returns (created, why not)."""
    import asyncpg

    ops = f"{_ident(trigram_schema)}.gin_trgm_ops"
    try:
        async with conn.transaction():  # e.g. no USAGE on the extension's schema: fall back, do not fail the open
            await conn.execute(
                f"CREATE INDEX IF NOT EXISTS {_ident(TRIGRAM_INDEX)} ON messages USING GIN (({TRIGRAM_DOCUMENT}) {ops}) "
                "WHERE role <> 'tool'"
            )
    except asyncpg.PostgresError as exc:
        return False, f"creating {TRIGRAM_INDEX} failed: {exc}"
    return True, ""


def search_problems(catalog: SearchCatalog) -> list[str]:
    """``doctor``'s lines for search objects missing or out of date ([] when current).

    Opening the store writable recreates each of them.
    """
    problems = []
    if not catalog.column:
        problems.append(f"table messages lacks the stored search column {SEARCH_COLUMN} (a writable open adds it)")
    if catalog.index_def is not None and not catalog.index_on_column:
        problems.append(f"search index {SEARCH_INDEX} is on the text expression, not {SEARCH_COLUMN} (a writable open replaces it)")
    wanted = ((SEARCH_INDEX, catalog.index_def is not None), (TIME_INDEX, catalog.time_index), (CJK_INDEX, catalog.cjk_index))
    missing = [name for name, present in wanted if not present]
    if catalog.trigram_schema is not None and not catalog.trigram_index:
        missing.append(TRIGRAM_INDEX)
    if missing:
        problems.append(f"missing index(es): {', '.join(missing)}")
    return problems


def search_facts(trigram: bool, why: str = "pg_trgm is not installed") -> dict[str, Any]:
    """The facts ``storage_info()`` reports, logged once per open."""
    if trigram:
        log.info("substring search: pg_trgm index %s", TRIGRAM_INDEX)
        return {"substring_index": f"pg_trgm ({TRIGRAM_INDEX})"}
    log.warning(
        "substring search: no pg_trgm index (%s); substring and CJK queries scan with ILIKE. "
        "Install the extension (CREATE EXTENSION pg_trgm, as a role that may) and reopen the store to add it.",
        why,
    )
    return {"substring_index": f"none: ILIKE scan ({why})"}
