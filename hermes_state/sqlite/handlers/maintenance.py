"""Handlers for bulk deletion, retention, import and VACUUM."""

from __future__ import annotations

import logging
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
from ..queries.compression import last_active_sql, marker_sql
from ..queries.listing import compact_session_columns
from ..queries.maintenance import filters_where
from ..conversations import same_conversation_sql
from .common import gc_prompts, store_prompt
from .messages import insert_rows
from .registry import handles
from .sessions import delete_sessions_by_id

log = logging.getLogger("hermes_state.maintenance")

_CHUNK = 500


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _existing_ids(conn: Any, ids: Iterable[str]) -> list[str]:
    """The ids among ``ids`` that name a session, in the given order."""
    wanted = list(dict.fromkeys(ids))
    found: set[str] = set()
    for chunk in _chunks(wanted):
        marks = ", ".join("?" * len(chunk))
        found.update(r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", chunk))
    return [i for i in wanted if i in found]


def _ids(conn: Any, sql: str, params: Iterable[Any] = ()) -> list[str]:
    return [r[0] for r in conn.execute(sql, tuple(params))]


_DELEGATE = marker_sql("sessions", "_delegate_from")


def delegate_descendants(conn: Any, seeds: list[str]) -> set[str]:
    """Every delegate sub-session below any of ``seeds`` (marker or parent link), seeds excluded."""
    found = set(seeds)
    frontier = list(seeds)
    while frontier:
        following: list[str] = []
        for chunk in _chunks(frontier):
            marks = ", ".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT id FROM sessions WHERE {_DELEGATE} IN ({marks}) "
                f"OR (parent_session_id IN ({marks}) AND {_DELEGATE} IS NOT NULL)",
                (*chunk, *chunk),
            )
            for (child,) in rows:
                if child not in found:
                    found.add(child)
                    following.append(child)
        frontier = following
    return found.difference(seeds)


@handles(DeleteSessions)
def delete_sessions(conn: Any, cmd: DeleteSessions) -> tuple[int, list[str]]:
    existing = _existing_ids(conn, cmd.session_ids)
    if not existing:
        return 0, []
    removed = existing + sorted(delegate_descendants(conn, existing))
    delete_sessions_by_id(conn, removed)
    return len(existing), removed


@handles(DeleteSessionIfEmpty)
def delete_session_if_empty(conn: Any, cmd: DeleteSessionIfEmpty) -> bool:
    cur = conn.execute(
        "DELETE FROM sessions WHERE id = ? AND title IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id) "
        "AND NOT EXISTS (SELECT 1 FROM sessions AS child WHERE child.parent_session_id = sessions.id)",
        (cmd.session_id,),
    )
    if cur.rowcount > 0:
        gc_prompts(conn)
        return True
    return False


def _delete_all(conn: Any, ids: list[str]) -> list[str]:
    if ids:
        delete_sessions_by_id(conn, ids)
    return ids


@handles(DeleteEmptySessions)
def delete_empty_sessions(conn: Any, cmd: DeleteEmptySessions) -> list[str]:
    return _delete_all(
        conn, _ids(conn, "SELECT id FROM sessions WHERE message_count = 0 AND ended_at IS NOT NULL AND archived = 0")
    )


@handles(PruneSessions)
def prune_sessions(conn: Any, cmd: PruneSessions) -> list[str]:
    where, params = filters_where(cmd.filters)
    return _delete_all(conn, _ids(conn, f"SELECT s.id FROM sessions AS s WHERE {where}", params))


@handles(PruneEmptyGhostSessions)
def prune_empty_ghost_sessions(conn: Any, cmd: PruneEmptyGhostSessions) -> list[str]:
    return _delete_all(
        conn,
        _ids(
            conn,
            "SELECT id FROM sessions WHERE source = 'tui' AND title IS NULL AND ended_at IS NOT NULL "
            "AND started_at < ? AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id)",
            (cmd.cutoff,),
        ),
    )


_ARCHIVE_LINEAGE_SQL = f"UPDATE sessions SET archived = 1 WHERE archived = 0 AND {same_conversation_sql('?1')}"


def archive_lineages(conn: Any, ids: list[str]) -> int:
    """Archive each of ``ids`` with its whole conversation (as ``set_session_archived``); returns len(ids)."""
    for session_id in ids:
        conn.execute(_ARCHIVE_LINEAGE_SQL, (session_id,))
    return len(ids)


@handles(ArchiveMatchingSessions)
def archive_matching_sessions(conn: Any, cmd: ArchiveMatchingSessions) -> int:
    where, params = filters_where(cmd.filters)
    return archive_lineages(conn, _ids(conn, f"SELECT s.id FROM sessions AS s WHERE {where}", params))


@handles(ArchiveStaleSessions)
def archive_stale_sessions(conn: Any, cmd: ArchiveStaleSessions) -> int:
    pinned = " AND s.pinned = 0" if cmd.exclude_pinned else ""
    ids = _ids(
        conn,
        f"SELECT s.id FROM sessions AS s WHERE s.archived = 0 AND COALESCE(s.end_reason, '') <> 'compression'"
        f"{pinned} AND {last_active_sql('s')} < ? ORDER BY s.started_at",
        (cmd.cutoff,),
    )
    return archive_lineages(conn, ids)


# ----------------------------------------------------------------------- import

# Columns an import may set directly; counters and links are computed here.
_NOT_IMPORTED = {"id", "title", "parent_session_id", "message_count", "tool_call_count", "system_prompt",
                 "system_prompt_hash"}


def _import_error(item: ImportedSession, message: str) -> dict[str, Any]:
    return {"index": item.index, "error": message, "session_id": item.session_id}


def _title_conflicts(conn: Any, fresh: list[ImportedSession]) -> list[dict[str, Any]]:
    titled = [item for item in fresh if item.title]
    taken: dict[str, str] = {}
    for chunk in _chunks([item.title for item in titled if item.title]):
        marks = ", ".join("?" * len(chunk))
        taken.update(conn.execute(f"SELECT title, id FROM sessions WHERE title IN ({marks})", chunk).fetchall())
    return [
        _import_error(item, f"title {item.title!r} is already used by session {taken[item.title]}")
        for item in titled
        if item.title in taken
    ]


def _insert_session(conn: Any, item: ImportedSession) -> None:
    allowed = set(compact_session_columns()) - _NOT_IMPORTED
    columns = dict(item.columns)
    unknown = set(columns) - allowed
    if unknown:
        raise ValueError(f"cannot import session column(s): {', '.join(sorted(unknown))}")
    store_prompt(conn, item.system_prompt, item.system_prompt_hash)
    names = ["id", "title", "system_prompt_hash", *columns]
    conn.execute(
        f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        (item.session_id, item.title, item.system_prompt_hash, *columns.values()),
    )
    added, calls = insert_rows(conn, item.session_id, item.rows)
    conn.execute(
        "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?", (added, calls, item.session_id)
    )


def _creates_cycle(conn: Any, child: str, parent: str, declared: dict[str, str | None]) -> bool:
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
        row = conn.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (current,)).fetchone()
        current = None if row is None else row[0]
    return False


@handles(ImportSessions)
def import_sessions(conn: Any, cmd: ImportSessions) -> dict[str, Any]:
    existing = set(_existing_ids(conn, (item.session_id for item in cmd.sessions)))
    fresh = [item for item in cmd.sessions if item.session_id not in existing]
    errors = _title_conflicts(conn, fresh)
    if errors:
        return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
    for item in fresh:
        _insert_session(conn, item)
    # Links are judged in payload order against the links the payload declares
    # (as the reference does): in a loop the first session met is detached.
    declared = {item.session_id: item.parent_session_id or None for item in fresh}
    detached = 0
    for item in fresh:
        parent = declared[item.session_id]
        if not parent:
            continue
        known = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone() is not None
        if known and not _creates_cycle(conn, item.session_id, parent, declared):
            conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (parent, item.session_id))
        else:
            declared[item.session_id] = None
            detached += 1
    return import_result(cmd.sessions, fresh, existing, detached)


# ----------------------------------------------------------------------- vacuum

FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")


def _checkpoint(conn: Any) -> None:
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except Exception as exc:
        log.debug("checkpoint around VACUUM failed: %s", exc)


@handles(Vacuum)
def vacuum(conn: Any, cmd: Vacuum) -> int:
    optimized = 0
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in FTS_TABLES:
        if table not in present:
            continue
        try:
            conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
            optimized += 1
        except Exception as exc:
            log.warning("FTS optimize failed for %s: %s", table, exc)
    _checkpoint(conn)
    conn.execute("VACUUM")
    _checkpoint(conn)
    return optimized
