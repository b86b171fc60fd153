"""PostgreSQL's own page-level check of the store's tables and indexes, through ``amcheck``.

Where an administrator installed the ``amcheck`` extension (contrib; the
store never installs anything), ``integrity_problems`` also verifies every
B-tree index (``bt_index_check``) and every table's heap
(``verify_heapam``): the counterpart of SQLite's ``PRAGMA integrity_check``.
Both take only ``AccessShareLock``, so writers are not held up. Without the
extension, or without the right to run it, these checks are not run and
say so through :func:`amcheck_schema`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["amcheck_schema", "page_problems"]

# Heap problems named per table (verify_heapam can return one row per tuple).
_HEAP_EXAMPLES = 3

_BTREE_INDEXES_SQL = """
SELECT c.oid, c.relname FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
JOIN pg_am AS am ON am.oid = c.relam
WHERE n.nspname = current_schema() AND t.relname = ANY($1::text[]) AND am.amname = 'btree'
  AND i.indisvalid AND i.indisready
ORDER BY c.relname
"""

_TABLES_SQL = """
SELECT c.oid, c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY($1::text[])
ORDER BY c.relname
"""


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


async def amcheck_schema(conn: Any) -> str | None:
    """The schema ``amcheck`` is installed in, or None when it is not installed."""
    return await conn.fetchval(
        "SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'amcheck'"
    )


async def page_problems(conn: Any, tables: list[str]) -> list[str] | None:
    """amcheck's findings on ``tables`` and their B-tree indexes; None when the check cannot run here.

    Each failed check is rolled back to its own savepoint, so one damaged
    index does not hide the others.
    """
    import asyncpg  # type: ignore[import-untyped]

    schema = await amcheck_schema(conn)
    if schema is None:
        return None
    fn = _quote(schema)
    problems: list[str] = []
    for oid, name in await conn.fetch(_BTREE_INDEXES_SQL, tables):
        try:
            async with conn.transaction():
                await conn.execute(f"SELECT {fn}.bt_index_check($1::oid::regclass)", oid)
        except asyncpg.InsufficientPrivilegeError:
            return None
        except asyncpg.PostgresError as exc:
            problems.append(f"index {name} fails amcheck: {exc}")
    for oid, name in await conn.fetch(_TABLES_SQL, tables):
        try:
            async with conn.transaction():
                rows = await conn.fetch(
                    f"SELECT blkno, offnum, msg FROM {fn}.verify_heapam($1::oid::regclass) LIMIT {_HEAP_EXAMPLES + 1}", oid
                )
        except asyncpg.InsufficientPrivilegeError:
            return None
        except asyncpg.PostgresError as exc:
            problems.append(f"table {name} fails amcheck: {exc}")
            continue
        if rows:
            found = "; ".join(f"block {r['blkno']} item {r['offnum']}: {r['msg']}" for r in rows[:_HEAP_EXAMPLES])
            more = " (and more)" if len(rows) > _HEAP_EXAMPLES else ""
            problems.append(f"table {name} fails amcheck: {found}{more}")
    return problems
