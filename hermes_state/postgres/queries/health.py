"""Health reads for ``doctor`` and monitoring: what ``sqlite.queries.health`` answers, for PostgreSQL.

PostgreSQL has no ``PRAGMA integrity_check``; its page-level counterpart,
``amcheck``, runs where an administrator installed it (``page_check``).
The rest is the store's own layer: what the open-time assessment
(``layout.assess``) finds (a schema object dropped or never created, a
column of the wrong type, a missing layout marker, a definition changed
since it was created, a shape the store refuses), an index left invalid by
a failed build, counters that drifted from the rows, rows whose parent is
gone (foreign keys disabled for a bulk load, or dropped by hand). Each problem comes back as one line naming what
is wrong and where.
"""

from __future__ import annotations

from typing import Any

from ...repairs import LEASE_TABLES
from ..layout import assess, declared_columns, read_store_catalog
from ..schema import FOREIGN_KEYS, SEARCH_INDEX, TABLES
from ..search_schema import search_catalog, search_problems
from .page_check import amcheck_schema, page_problems
from .registry import query

__all__ = ["DRIFT_SQL", "INDEX_STATE_SQL", "MAX_INTEGRITY_PROBLEMS", "search_index_facts"]

# As on SQLite: a badly damaged store could report thousands of rows.
MAX_INTEGRITY_PROBLEMS = 20
# Example ids named per problem line.
_EXAMPLES = 5

# Indexes of the store's tables, with their state (catalog joins only: pg_indexes calls
# pg_get_indexdef, which fails on indexes of other schemas being dropped meanwhile).
INDEX_STATE_SQL = """
SELECT c.relname AS name, t.relname AS table_name, am.amname AS method, i.indisvalid AND i.indisready AS valid,
       EXISTS (SELECT 1 FROM pg_opclass AS oc WHERE oc.oid = ANY(i.indclass::oid[]) AND oc.opcname = 'gin_trgm_ops')
           AS trigram
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
JOIN pg_am AS am ON am.oid = c.relam
WHERE n.nspname = current_schema() AND t.relname = ANY($1::text[])
ORDER BY c.relname
"""

# Foreign keys are enforced by system triggers; a disabled one lets orphans in.
_DISABLED_FK_TRIGGERS_SQL = """
SELECT DISTINCT t.relname FROM pg_trigger AS tg
JOIN pg_class AS t ON t.oid = tg.tgrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
JOIN pg_constraint AS con ON con.oid = tg.tgconstraint AND con.contype = 'f'
WHERE n.nspname = current_schema() AND tg.tgenabled = 'D'
ORDER BY t.relname
"""

# message_count counts the rows written since the transcript was last replaced
# or compacted, so it never exceeds the rows the session holds, and equals them
# while every row is active and uncompacted (rewind, compaction and archiving
# replace are what make the two differ legitimately). Rows: (id, counted, stored).
DRIFT_SQL = """
WITH stored AS (
    SELECT session_id, COUNT(*) AS n,
           bool_and(COALESCE(active, 0) = 1 AND COALESCE(compacted, 0) = 0) AS plain
    FROM messages GROUP BY session_id
)
SELECT s.id, COALESCE(s.message_count, 0) AS counted, COALESCE(st.n, 0) AS stored
FROM sessions AS s LEFT JOIN stored AS st ON st.session_id = s.id
WHERE COALESCE(s.message_count, 0) > COALESCE(st.n, 0)
   OR (COALESCE(st.plain, TRUE) AND COALESCE(s.message_count, 0) <> COALESCE(st.n, 0))
"""
_COUNTERS_SQL = f"SELECT *, COUNT(*) OVER () AS total FROM ({DRIFT_SQL}) AS drift ORDER BY id LIMIT {_EXAMPLES}"

# (what, grouped, SQL returning (example id, rows, total ids)) for rows whose parent is gone;
# grouped checks count rows per missing session.
_ORPHAN_CHECKS: tuple[tuple[str, bool, str], ...] = (
    (
        "messages of missing sessions",
        True,
        "SELECT m.session_id, COUNT(*), COUNT(*) OVER () FROM messages AS m "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = m.session_id) "
        f"GROUP BY m.session_id ORDER BY m.session_id LIMIT {_EXAMPLES}",
    ),
    (
        "usage rows of missing sessions",
        True,
        "SELECT u.session_id, COUNT(*), COUNT(*) OVER () FROM session_model_usage AS u "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = u.session_id) "
        f"GROUP BY u.session_id ORDER BY u.session_id LIMIT {_EXAMPLES}",
    ),
    (
        "sessions whose parent_session_id names no session",
        False,
        "SELECT c.id, 1, COUNT(*) OVER () FROM sessions AS c WHERE c.parent_session_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = c.parent_session_id) "
        f"ORDER BY c.id LIMIT {_EXAMPLES}",
    ),
    (
        "sessions whose system_prompt_hash names no stored prompt",
        False,
        "SELECT s.id, 1, COUNT(*) OVER () FROM sessions AS s WHERE s.system_prompt_hash IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM system_prompts AS p WHERE p.hash = s.system_prompt_hash) "
        f"ORDER BY s.id LIMIT {_EXAMPLES}",
    ),
)


def _names(items: list[str]) -> str:
    return ", ".join(items)


async def _schema_problems(conn: Any) -> tuple[list[str], bool]:
    """(problems, whether every table has its columns): the layout gaps and refusals the open-time
    assessment finds (:func:`..layout.assess`), the search objects, indexes left invalid, foreign
    keys unchecked or not enforced."""
    catalog = await read_store_catalog(conn)
    assessment = assess(catalog)
    invalid_line = f"invalid index(es) to rebuild: {', '.join(assessment.invalid)}"
    problems = [*assessment.fatal, *(p for p in assessment.pending if p != invalid_line)]
    complete = all(set(columns) <= set(catalog.columns.get(table, {})) for table, columns in declared_columns().items())
    indexes = await conn.fetch(INDEX_STATE_SQL, list(TABLES))
    if "messages" in catalog.columns:  # the search column and indexes live outside INDEXES
        problems.extend(search_problems(await search_catalog(conn)))
    for r in indexes:
        if not r["valid"]:
            problems.append(
                f"index {r['name']} on {r['table_name']} is invalid (a failed or interrupted build): "
                f"REINDEX INDEX {r['name']}, or drop it if the store did not create it"
            )
    unchecked = [name for name in FOREIGN_KEYS if catalog.foreign_keys.get(name) is False]
    if unchecked:
        problems.append(f"foreign key(s) added NOT VALID, existing rows unchecked: {_names(unchecked)}")
    disabled = [r[0] for r in await conn.fetch(_DISABLED_FK_TRIGGERS_SQL)]
    if disabled:
        problems.append(f"foreign keys not enforced (triggers disabled) on: {_names(disabled)}")
    return problems, complete


async def _fetch_checked(conn: Any, what: str, sql: str, problems: list[str]) -> list[Any]:
    """Rows of one row check; a check the data itself breaks (a damaged page) becomes a problem line.

    Each check runs in its own savepoint, so the ones after it still run.
    """
    import asyncpg  # type: ignore[import-untyped]

    try:
        async with conn.transaction():
            return list(await conn.fetch(sql))
    except asyncpg.InternalServerError as exc:  # class XX: XX001 data_corrupted, XX002 index_corrupted
        problems.append(f"check of {what} failed: {exc}")
    return []


async def _row_problems(conn: Any) -> list[str]:
    """Counters that disagree with the rows, and rows whose parent is gone."""
    problems: list[str] = []
    rows = await _fetch_checked(conn, "message counters", _COUNTERS_SQL, problems)
    if rows:
        examples = ", ".join(f"{r['id']} counts {r['counted']}, holds {r['stored']}" for r in rows)
        problems.append(f"message_count disagrees with the stored rows in {rows[0]['total']} session(s): {examples}")
    for what, grouped, sql in _ORPHAN_CHECKS:
        found = await _fetch_checked(conn, what, sql, problems)
        if found:
            if grouped:
                examples = ", ".join(f"{r[0]} ({r[1]} row{'s' if r[1] != 1 else ''})" for r in found)
                problems.append(f"{what}: {found[0][2]} missing session id(s): {examples}")
            else:
                problems.append(f"{what}: {found[0][2]}: {', '.join(str(r[0]) for r in found)}")
    return problems


@query
async def integrity_problems(conn: Any) -> list[str]:
    """The store's consistency problems (schema objects, indexes, counters, orphans, and amcheck's
    page checks where that extension is installed): [] when clean."""
    problems, complete = await _schema_problems(conn)
    # Damaged pages first: they explain any row check they make fail.
    problems.extend(await page_problems(conn, list(TABLES)) or [])
    if complete:  # the row checks need every table and column
        problems.extend(await _row_problems(conn))
    return problems[:MAX_INTEGRITY_PROBLEMS]


@query
async def compression_leases(conn: Any) -> list[dict[str, Any]]:
    """Every row of ``compression_locks`` (live and expired), oldest acquisition first."""
    rows = await conn.fetch(
        "SELECT session_id, holder, acquired_at, expires_at FROM compression_locks ORDER BY acquired_at, session_id"
    )
    return [dict(r) for r in rows]


@query
async def leases(conn: Any) -> list[dict[str, Any]]:
    """Every row of every lease table (``repairs.LEASE_TABLES``) with its ``kind``, oldest acquisition first."""
    rows: list[dict[str, Any]] = []
    for lease in LEASE_TABLES:
        found = await conn.fetch(f"SELECT {lease.key} AS key, holder, acquired_at, expires_at FROM {lease.table}")
        rows.extend({"kind": lease.kind, **dict(r)} for r in found)
    return sorted(rows, key=lambda row: (row["acquired_at"], row["kind"], row["key"]))


async def search_index_facts(conn: Any) -> dict[str, Any]:
    """``fts``: ``tsvector`` (the GIN search index is valid), ``invalid`` or ``none``;
    ``trigram``: ``indexed`` (a ``gin_trgm_ops`` index serves substring search),
    ``available`` (pg_trgm installed, no such index) or ``unavailable``; ``pg_trgm``:
    its version or None; ``amcheck``: whether that extension is installed (the
    integrity check then verifies pages too, where the role may run it)."""
    search = None
    trigram_index = False
    for r in await conn.fetch(INDEX_STATE_SQL, ["messages"]):
        if r["name"] == SEARCH_INDEX:
            search = bool(r["valid"]) and r["method"] == "gin"
        trigram_index = trigram_index or (bool(r["trigram"]) and bool(r["valid"]))
    extension = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'pg_trgm'")
    return {
        "fts": "none" if search is None else ("tsvector" if search else "invalid"),
        "trigram": "indexed" if trigram_index else ("available" if extension else "unavailable"),
        "pg_trgm": extension,
        "amcheck": await amcheck_schema(conn) is not None,
    }
