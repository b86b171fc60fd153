"""Raw SQL on a store's database, for arranging rows the API cannot write and for inspecting them.

Works on both backends: a separate autocommit connection to the SQLite file,
or a separate asyncpg connection to the PostgreSQL store's schema. Write the
statement with ``?`` placeholders; on PostgreSQL they become ``$1, $2, ...``
(test SQL never has a literal ``?``). Statements must be valid on both
dialects; tests that need a dialect's own feature (triggers, file locks)
are marked for that backend.
"""

from __future__ import annotations

from typing import Any

from hermes_state.sqlite.driver import driver_module


def is_postgres(db: Any) -> bool:
    """Whether ``db`` is a PostgreSQL store."""
    return hasattr(db, "_dsn")


def _numbered(sql: str) -> str:
    parts = sql.split("?")
    return "".join(part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, 1))


async def fetch_rows(db: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a separate connection; returns its rows as tuples."""
    if is_postgres(db):
        import asyncpg

        from hermes_state.postgres.dsn import asyncpg_dsn

        conn = await asyncpg.connect(asyncpg_dsn(db._dsn))
        try:
            return [tuple(r) for r in await conn.fetch(_numbered(sql), *params)]
        finally:
            await conn.close()
    conn = driver_module().connect(str(db.db_path), isolation_level=None)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


async def raw_exec(db: Any, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run one statement on the store's database through a separate connection."""
    await fetch_rows(db, sql, params)


async def set_columns(db: Any, session_id: str, **values: Any) -> None:
    """Set session columns the API does not write directly (started_at, title, flags...)."""
    assignments = ", ".join(f"{k} = ?" for k in values)
    await raw_exec(db, f"UPDATE sessions SET {assignments} WHERE id = ?", (*values.values(), session_id))
