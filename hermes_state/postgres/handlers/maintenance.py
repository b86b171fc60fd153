"""Handlers for bulk deletion, retention, import and VACUUM (the rules of ``sqlite.handlers.maintenance``).

``Vacuum`` keeps its meaning on PostgreSQL: the search indexes' pending
entries are merged (``gin_clean_pending_list``, what FTS5's ``optimize`` is
to SQLite), then the store's own tables get ``VACUUM (ANALYZE)``; it runs
outside any transaction, and never touches other schemas of the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...rules import import_result
from ...commands.maintenance import (
    ArchiveMatchingSessions,
    ArchiveStaleSessions,
    DeleteEmptySessions,
    DeleteSessionIfEmpty,
    DeleteSessions,
    ImportedSession,
    ImportSessions,
    PruneEmptyGhostSessions,
    PruneSessions,
    Vacuum,
)
from ..lineage_sql import last_active_sql, marker_sql
from ..queries.listing import COMPACT_SESSION_COLUMNS, Params
from ..queries.maintenance import filters_where
from ..schema import TABLES
from ..conversations import same_conversation_sql
from .common import gc_prompts, insert_messages, store_prompt
from .listing import rows_changed
from .registry import handles
from .sessions import delete_sessions_by_id


async def _existing_ids(conn: Any, ids: Iterable[str]) -> list[str]:
    """The ids among ``ids`` that name a session, in the given order."""
    wanted = list(dict.fromkeys(ids))
    found = {r[0] for r in await conn.fetch("SELECT id FROM sessions WHERE id = ANY($1::text[])", wanted)}
    return [i for i in wanted if i in found]


async def _ids(conn: Any, sql: str, *params: Any) -> list[str]:
    return [r[0] for r in await conn.fetch(sql, *params)]


_DELEGATE = marker_sql("sessions", "_delegate_from")


async def delegate_descendants(conn: Any, seeds: list[str]) -> set[str]:
    """Every delegate sub-session below any of ``seeds`` (marker or parent link), seeds excluded."""
    found = set(seeds)
    frontier = list(seeds)
    while frontier:
        rows = await conn.fetch(
            f"SELECT id FROM sessions WHERE {_DELEGATE} = ANY($1::text[]) "
            f"OR (parent_session_id = ANY($1::text[]) AND {_DELEGATE} IS NOT NULL)",
            frontier,
        )
        following = [r[0] for r in rows if r[0] not in found]
        following = list(dict.fromkeys(following))
        found.update(following)
        frontier = following
    return found.difference(seeds)


@handles(DeleteSessions)
async def delete_sessions(conn: Any, cmd: DeleteSessions) -> tuple[int, list[str]]:
    existing = await _existing_ids(conn, cmd.session_ids)
    if not existing:
        return 0, []
    removed = existing + sorted(await delegate_descendants(conn, existing))
    await delete_sessions_by_id(conn, removed)
    return len(existing), removed


@handles(DeleteSessionIfEmpty)
async def delete_session_if_empty(conn: Any, cmd: DeleteSessionIfEmpty) -> bool:
    status = await conn.execute(
        "DELETE FROM sessions WHERE id = $1 AND title IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id) "
        "AND NOT EXISTS (SELECT 1 FROM sessions AS child WHERE child.parent_session_id = sessions.id)",
        cmd.session_id,
    )
    if rows_changed(status) > 0:
        await gc_prompts(conn)
        return True
    return False


async def _delete_all(conn: Any, ids: list[str]) -> list[str]:
    if ids:
        await delete_sessions_by_id(conn, ids)
    return ids


@handles(DeleteEmptySessions)
async def delete_empty_sessions(conn: Any, cmd: DeleteEmptySessions) -> list[str]:
    return await _delete_all(
        conn,
        await _ids(conn, "SELECT id FROM sessions WHERE message_count = 0 AND ended_at IS NOT NULL AND archived = 0"),
    )


@handles(PruneSessions)
async def prune_sessions(conn: Any, cmd: PruneSessions) -> list[str]:
    params = Params()
    where = filters_where(cmd.filters, params)
    return await _delete_all(conn, await _ids(conn, f"SELECT s.id FROM sessions AS s WHERE {where}", *params.values))


@handles(PruneEmptyGhostSessions)
async def prune_empty_ghost_sessions(conn: Any, cmd: PruneEmptyGhostSessions) -> list[str]:
    ids = await _ids(
        conn,
        "SELECT id FROM sessions WHERE source = 'tui' AND title IS NULL AND ended_at IS NOT NULL "
        "AND started_at < $1 AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id)",
        cmd.cutoff,
    )
    return await _delete_all(conn, ids)


_ARCHIVE_LINEAGE_SQL = f"UPDATE sessions SET archived = 1 WHERE archived = 0 AND {same_conversation_sql('$1')}"


async def archive_lineages(conn: Any, ids: list[str]) -> int:
    """Archive each of ``ids`` with its whole conversation (as ``set_session_archived``); returns len(ids)."""
    for session_id in ids:
        await conn.execute(_ARCHIVE_LINEAGE_SQL, session_id)
    return len(ids)


@handles(ArchiveMatchingSessions)
async def archive_matching_sessions(conn: Any, cmd: ArchiveMatchingSessions) -> int:
    params = Params()
    where = filters_where(cmd.filters, params)
    return await archive_lineages(conn, await _ids(conn, f"SELECT s.id FROM sessions AS s WHERE {where}", *params.values))


@handles(ArchiveStaleSessions)
async def archive_stale_sessions(conn: Any, cmd: ArchiveStaleSessions) -> int:
    pinned = " AND s.pinned = 0" if cmd.exclude_pinned else ""
    ids = await _ids(
        conn,
        f"SELECT s.id FROM sessions AS s WHERE s.archived = 0 AND COALESCE(s.end_reason, '') <> 'compression'"
        f"{pinned} AND {last_active_sql('s')} < $1 ORDER BY s.started_at",
        cmd.cutoff,
    )
    return await archive_lineages(conn, ids)


# ----------------------------------------------------------------------- import

# Columns an import may set directly; counters and links are computed here.
_NOT_IMPORTED = {"id", "title", "parent_session_id", "message_count", "tool_call_count", "system_prompt",
                 "system_prompt_hash"}
_IMPORTABLE = set(COMPACT_SESSION_COLUMNS) - _NOT_IMPORTED


def _import_error(item: ImportedSession, message: str) -> dict[str, Any]:
    return {"index": item.index, "error": message, "session_id": item.session_id}


async def _title_conflicts(conn: Any, fresh: list[ImportedSession]) -> list[dict[str, Any]]:
    titled = [item for item in fresh if item.title]
    rows = await conn.fetch(
        "SELECT title, id FROM sessions WHERE title = ANY($1::text[])", [item.title for item in titled]
    )
    taken = {r[0]: r[1] for r in rows}
    return [
        _import_error(item, f"title {item.title!r} is already used by session {taken[item.title]}")
        for item in titled
        if item.title in taken
    ]


# column -> the Python type asyncpg binds for it (ints and floats arrive as JSON numbers).
_FLOAT_COLUMNS = {name for name, kind in TABLES["sessions"] if kind.startswith("DOUBLE")}


def _column_value(name: str, value: Any) -> Any:
    if name in _FLOAT_COLUMNS and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


async def _insert_session(conn: Any, item: ImportedSession) -> None:
    columns = dict(item.columns)
    unknown = set(columns) - _IMPORTABLE
    if unknown:
        raise ValueError(f"cannot import session column(s): {', '.join(sorted(unknown))}")
    await store_prompt(conn, item.system_prompt, item.system_prompt_hash)
    names = ["id", "title", "system_prompt_hash", *columns]
    values = [item.session_id, item.title, item.system_prompt_hash, *(_column_value(k, v) for k, v in columns.items())]
    await conn.execute(
        f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join(f'${i}' for i in range(1, len(names) + 1))})",
        *values,
    )
    await insert_messages(conn, [(item.session_id, row) for row in item.rows], count=False)
    await conn.execute(
        "UPDATE sessions SET message_count = $1, tool_call_count = $2 WHERE id = $3",
        len(item.rows), sum(r.tool_call_count for r in item.rows), item.session_id,
    )


async def _creates_cycle(conn: Any, child: str, parent: str, declared: dict[str, str | None]) -> bool:
    """Whether linking ``child`` to ``parent`` closes a loop, following the payload's own links first."""
    seen = {child}
    current: str | None = parent
    while current is not None:
        if current in seen:
            return True
        seen.add(current)
        if current in declared:
            current = declared[current]
            continue
        current = await conn.fetchval("SELECT parent_session_id FROM sessions WHERE id = $1", current)
    return False


@handles(ImportSessions)
async def import_sessions(conn: Any, cmd: ImportSessions) -> dict[str, Any]:
    existing = set(await _existing_ids(conn, (item.session_id for item in cmd.sessions)))
    fresh = [item for item in cmd.sessions if item.session_id not in existing]
    errors = await _title_conflicts(conn, fresh)
    if errors:
        return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
    for item in fresh:
        await _insert_session(conn, item)
    # Links are judged in payload order against the links the payload declares
    # (as the reference does): in a loop the first session met is detached.
    declared = {item.session_id: item.parent_session_id or None for item in fresh}
    detached = 0
    for item in fresh:
        parent = declared[item.session_id]
        if not parent:
            continue
        known = await conn.fetchval("SELECT 1 FROM sessions WHERE id = $1", parent) is not None
        if known and not await _creates_cycle(conn, item.session_id, parent, declared):
            await conn.execute("UPDATE sessions SET parent_session_id = $1 WHERE id = $2", parent, item.session_id)
        else:
            declared[item.session_id] = None
            detached += 1
    return import_result(cmd.sessions, fresh, existing, detached)


# ----------------------------------------------------------------------- vacuum

_SEARCH_INDEXES_SQL = (
    "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
    "JOIN pg_class AS t ON t.oid = i.indrelid JOIN pg_namespace AS n ON n.oid = t.relnamespace "
    "JOIN pg_am AS am ON am.oid = c.relam "
    "WHERE n.nspname = current_schema() AND t.relname = 'messages' AND am.amname = 'gin' ORDER BY c.relname"
)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@handles(Vacuum)
async def vacuum(conn: Any, cmd: Vacuum) -> int:
    """Merge the search indexes' pending lists, then VACUUM (ANALYZE) the store's tables; returns indexes merged.

    The schema is read in a transaction and the VACUUM names it: behind a
    transaction pooler, ``search_path`` holds only inside transactions.
    """
    async with conn.transaction():
        schema = await conn.fetchval("SELECT current_schema()")
        indexes = await _ids(conn, _SEARCH_INDEXES_SQL)
        for name in indexes:
            await conn.execute("SELECT gin_clean_pending_list($1::regclass)", f'"{name}"')
    tables = ", ".join(f"{_ident(schema)}.{_ident(table)}" for table in TABLES)
    await conn.execute(f"VACUUM (ANALYZE) {tables}")
    return len(indexes)
