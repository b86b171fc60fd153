"""Raw SQL beside a store, on either backend: set up states the API cannot reach, inspect stored rows.

Statements use ``?`` placeholders; on PostgreSQL they become ``$1, $2, ...``
and run through a separate asyncpg connection on the store's own schema.
On SQLite they run through the store's own SQLite library on its file.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from contextlib import closing
from typing import Any

from hermes_state.sqlite.driver import driver_module


def is_postgres(db: Any) -> bool:
    """True when ``db`` is a PostgreSQL store."""
    return str(db.db_path).startswith("postgresql")


def _numbered(sql: str) -> str:
    counter = itertools.count(1)
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


async def _pg(db: Any, sql: str, params: tuple[Any, ...], fetch: bool) -> list[tuple[Any, ...]]:
    import asyncpg

    from hermes_state.postgres.dsn import asyncpg_dsn

    conn = await asyncpg.connect(asyncpg_dsn(db._backend.dsn))
    try:
        if fetch:
            return [tuple(r) for r in await conn.fetch(_numbered(sql), *params)]
        await conn.execute(_numbered(sql), *params)
        return []
    finally:
        await conn.close()


def _sqlite(path: Any, sql: str, params: tuple[Any, ...], fetch: bool) -> list[tuple[Any, ...]]:
    # The store's own SQLite library, so file locks of both connections see each other.
    with closing(driver_module().connect(str(path), timeout=10)) as conn:
        rows = conn.execute(sql, params).fetchall()
        conn.commit()
        return rows if fetch else []


async def raw_rows(db: Any, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows ``sql`` returns, as tuples."""
    if is_postgres(db):
        return await _pg(db, sql, params, True)
    return await asyncio.to_thread(_sqlite, db.db_path, sql, params, True)


async def raw_exec(db: Any, sql: str, *params: Any) -> None:
    """Run and commit ``sql``."""
    if is_postgres(db):
        await _pg(db, sql, params, False)
    else:
        await asyncio.to_thread(_sqlite, db.db_path, sql, params, False)


def store_target(db: Any) -> str:
    """What opens another store on ``db``'s database: the SQLite path, or the PostgreSQL DSN with its schema."""
    return str(db._backend.dsn) if is_postgres(db) else str(db.db_path)


def open_store(target: str, **kwargs: Any) -> Any:
    """A store of the right backend for ``target`` (a path or a ``postgresql+asyncpg://`` DSN)."""
    if target.startswith("postgresql"):
        from hermes_state.postgres import SessionDB as PostgresSessionDB

        return PostgresSessionDB(target, **kwargs)
    from hermes_state import SessionDB

    return SessionDB(target, **kwargs)
